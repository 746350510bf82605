//! The library-owned, versioned and checksummed migrations of the PostgreSQL store (ST-28).
//!
//! Table names in the migration texts are written `@wf_<name>`; [`Schema::sql`] qualifies
//! them with the configured schema, so the checksum of a migration does not depend on the
//! schema it is applied to. Concurrent migrators (several processes starting at once) are
//! serialised by a transaction-scoped advisory lock on a hash of the schema name (ST-27); the
//! later one finds the work done.

use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgPool, Row};

use crate::base::BoxFuture;
use crate::store::error::{StoreError, StoreResult};
use crate::store::migrations::MigrateMode;

/// The configured schema: its validated name and the SQL qualifier derived from it.
#[derive(Debug, Clone)]
pub(super) struct Schema {
    name: String,
    prefix: String,
}

impl Schema {
    /// Validates a schema name: 1 to 48 bytes of `[a-z0-9_]`, not starting with a digit (it
    /// is also part of the notification channel's name, at most 63 bytes).
    pub(super) fn new(name: &str) -> StoreResult<Self> {
        let valid = !name.is_empty()
            && name.len() <= 48
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            && !name.as_bytes().first().is_some_and(u8::is_ascii_digit);
        if !valid {
            return Err(StoreError::Invalid {
                what: "schema",
                reason: format!(
                    "{name:?} must be 1 to 48 bytes of [a-z0-9_], not starting with a digit"
                ),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            prefix: format!("\"{name}\".wf_"),
        })
    }

    /// The schema's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// The notification channel of this schema's store (ST-27).
    pub(super) fn channel(&self) -> String {
        format!("workflow_{}", self.name)
    }

    /// `text` with every `@wf_` replaced by the schema-qualified table prefix.
    pub(super) fn sql(&self, text: &str) -> String {
        text.replace("@wf_", &self.prefix)
    }
}

/// The embedded, forward-only migrations: `(version, name, sql)`.
pub(super) const MIGRATIONS: &[(u32, &str, &str)] = &[
    (1, "0001_init", MIGRATION_0001),
    (2, "0002_definitions", MIGRATION_0002),
    (3, "0003_commit_function", MIGRATION_0003),
    (4, "0004_commit_cost", MIGRATION_0004),
    (5, "0005_journal_rows_per_commit", MIGRATION_0005),
    (6, "0006_instance_updated_in_place", MIGRATION_0006),
    (7, "0007_journal_cap_amortised", MIGRATION_0007),
    (8, "0008_flow_control", MIGRATION_0008),
    (9, "0009_process_liveness", MIGRATION_0009),
    (10, "0010_debounced_sends", MIGRATION_0010),
    (11, "0011_receipts_by_stimulus", MIGRATION_0011),
    (12, "0012_instance_keys", MIGRATION_0012),
    (13, "0013_kept_lease", MIGRATION_0013),
    (14, "0014_single_row_commits", MIGRATION_0014),
];

/// The common transition's rows written as single rows (ST-16): a commit with one receipt,
/// one bookmark or one timer removed or added writes it with a plain `INSERT .. VALUES` or a
/// `DELETE` by its key instead of expanding arrays with `unnest` and aggregating what was
/// written, so the server sets up a few plan nodes instead of a dozen for each. What a
/// refused commit raises is unchanged (`WFRX0`, `WFBK0`, `WFTM0` naming the id), and so is
/// everything else of migration 13's function.
const MIGRATION_0014: &str = r#"
CREATE OR REPLACE FUNCTION @wf_commit(
    p_id TEXT, p_expected BIGINT, p_token BIGINT, p_nonce BIGINT, p_now BIGINT, p_state TEXT,
    p_status TEXT, p_sub_status TEXT, p_correlation TEXT, p_finished_at BIGINT,
    p_clear_control BOOLEAN, p_release BOOLEAN, p_keep_until BIGINT,
    p_receipts TEXT[], p_bookmarks_removed TEXT[],
    p_bm_ids TEXT[], p_bm_hashes TEXT[], p_bm_names TEXT[], p_bm_nodes TEXT[],
    p_bm_contexts BIGINT[], p_bm_look_backs BIGINT[], p_bm_created BIGINT[],
    p_timers_removed TEXT[], p_tm_ids TEXT[], p_tm_kinds TEXT[], p_tm_due BIGINT[],
    p_timers_parked BOOLEAN, p_clear_waits BOOLEAN,
    p_compact_through BIGINT, p_compact_entries TEXT,
    p_jn_count BIGINT, p_jn_entries TEXT, p_max_journal BIGINT, p_consumed TEXT[],
    p_control_targets TEXT[], p_control_texts TEXT[],
    p_resolved_ids TEXT[], p_resolutions TEXT[],
    p_listing TEXT
) RETURNS TABLE (new_version BIGINT, definition TEXT, kept BOOLEAN)
LANGUAGE plpgsql AS $body$
DECLARE
    cur RECORD;
    taken TEXT;
    fresh TEXT[];
    v_first BIGINT;
    v_last BIGINT;
    v_count BIGINT;
    done BIGINT;
    jrows BIGINT;
    jstored BIGINT;
    jfirst BIGINT;
    jlast BIGINT;
    excess BIGINT;
    keep BOOLEAN;
    gone BOOLEAN;
BEGIN
    SELECT i.version, i.lease_owner, i.lease_token, i.lease_nonce, i.definition_name,
           i.definition_version, i.correlation_id, i.journal_rows, i.journal_stored,
           i.journal_first, i.journal_last, i.lease_wanted
      INTO cur FROM @wf_instances i WHERE i.instance_id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'WFNF0', MESSAGE = p_id;
    END IF;
    IF cur.version <> p_expected THEN
        RAISE EXCEPTION USING ERRCODE = 'WFCF0', MESSAGE = cur.version::TEXT;
    END IF;
    IF cur.lease_owner IS NULL OR cur.lease_token <> p_token
       OR cur.lease_nonce IS DISTINCT FROM p_nonce THEN
        RAISE EXCEPTION USING ERRCODE = 'WFFN0', MESSAGE = cur.lease_token::TEXT;
    END IF;
    IF cardinality(p_receipts) = 1 THEN
        INSERT INTO @wf_receipts (instance_id, stimulus_id, at)
        VALUES (p_id, p_receipts[1], p_now)
        ON CONFLICT (instance_id, stimulus_id) DO NOTHING;
        GET DIAGNOSTICS done = ROW_COUNT;
        IF done = 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'WFRX0', MESSAGE = p_receipts[1];
        END IF;
    ELSIF cardinality(p_receipts) > 1 THEN
        WITH ins AS (
            INSERT INTO @wf_receipts (instance_id, stimulus_id, at)
            SELECT p_id, r.s, p_now FROM unnest(p_receipts) AS r(s)
            ON CONFLICT (instance_id, stimulus_id) DO NOTHING
            RETURNING stimulus_id)
        SELECT array_agg(ins.stimulus_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_receipts) THEN
            SELECT r.s INTO taken FROM unnest(p_receipts) WITH ORDINALITY AS r(s, n)
             WHERE fresh IS NULL OR NOT (r.s = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_receipts) WITH ORDINALITY AS d(s, n)
                           WHERE d.s = r.s AND d.n < r.n)
             ORDER BY r.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFRX0', MESSAGE = taken;
        END IF;
    END IF;
    IF cardinality(p_bookmarks_removed) = 1 THEN
        DELETE FROM @wf_bookmarks
         WHERE bookmark_id = p_bookmarks_removed[1] AND instance_id = p_id;
    ELSIF cardinality(p_bookmarks_removed) > 1 THEN
        DELETE FROM @wf_bookmarks
         WHERE instance_id = p_id AND bookmark_id = ANY(p_bookmarks_removed);
    END IF;
    IF cardinality(p_bm_ids) = 1 THEN
        INSERT INTO @wf_bookmarks (bookmark_id, instance_id, hash, name, node_id, context_id,
            correlation_id, definition_name, definition_version, look_back, created_at)
        VALUES (p_bm_ids[1], p_id, p_bm_hashes[1], p_bm_names[1], p_bm_nodes[1],
                p_bm_contexts[1], p_correlation, cur.definition_name, cur.definition_version,
                p_bm_look_backs[1], p_bm_created[1])
        ON CONFLICT (bookmark_id) DO NOTHING;
        GET DIAGNOSTICS done = ROW_COUNT;
        IF done = 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'WFBK0', MESSAGE = p_bm_ids[1];
        END IF;
    ELSIF cardinality(p_bm_ids) > 1 THEN
        WITH ins AS (
            INSERT INTO @wf_bookmarks (bookmark_id, instance_id, hash, name, node_id,
                context_id, correlation_id, definition_name, definition_version, look_back,
                created_at)
            SELECT b.id, p_id, b.hash, b.name, b.node, b.context, p_correlation,
                   cur.definition_name, cur.definition_version, b.look_back, b.created
              FROM unnest(p_bm_ids, p_bm_hashes, p_bm_names, p_bm_nodes, p_bm_contexts,
                          p_bm_look_backs, p_bm_created)
                   AS b(id, hash, name, node, context, look_back, created)
            ON CONFLICT (bookmark_id) DO NOTHING
            RETURNING bookmark_id)
        SELECT array_agg(ins.bookmark_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_bm_ids) THEN
            SELECT b.id INTO taken FROM unnest(p_bm_ids) WITH ORDINALITY AS b(id, n)
             WHERE fresh IS NULL OR NOT (b.id = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_bm_ids) WITH ORDINALITY AS d(id, n)
                           WHERE d.id = b.id AND d.n < b.n)
             ORDER BY b.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFBK0', MESSAGE = taken;
        END IF;
    END IF;
    IF cur.correlation_id IS DISTINCT FROM p_correlation THEN
        UPDATE @wf_bookmarks SET correlation_id = p_correlation
         WHERE instance_id = p_id AND correlation_id IS DISTINCT FROM p_correlation;
    END IF;
    IF cardinality(p_timers_removed) = 1 THEN
        DELETE FROM @wf_timers WHERE timer_id = p_timers_removed[1] AND instance_id = p_id;
    ELSIF cardinality(p_timers_removed) > 1 THEN
        DELETE FROM @wf_timers WHERE instance_id = p_id AND timer_id = ANY(p_timers_removed);
    END IF;
    IF cardinality(p_tm_ids) = 1 THEN
        INSERT INTO @wf_timers (timer_id, instance_id, kind, due_at, parked)
        VALUES (p_tm_ids[1], p_id, p_tm_kinds[1], p_tm_due[1], FALSE)
        ON CONFLICT (timer_id) DO NOTHING;
        GET DIAGNOSTICS done = ROW_COUNT;
        IF done = 0 THEN
            RAISE EXCEPTION USING ERRCODE = 'WFTM0', MESSAGE = p_tm_ids[1];
        END IF;
    ELSIF cardinality(p_tm_ids) > 1 THEN
        WITH ins AS (
            INSERT INTO @wf_timers (timer_id, instance_id, kind, due_at, parked)
            SELECT t.id, p_id, t.kind, t.due, FALSE
              FROM unnest(p_tm_ids, p_tm_kinds, p_tm_due) AS t(id, kind, due)
            ON CONFLICT (timer_id) DO NOTHING
            RETURNING timer_id)
        SELECT array_agg(ins.timer_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_tm_ids) THEN
            SELECT t.id INTO taken FROM unnest(p_tm_ids) WITH ORDINALITY AS t(id, n)
             WHERE fresh IS NULL OR NOT (t.id = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_tm_ids) WITH ORDINALITY AS d(id, n)
                           WHERE d.id = t.id AND d.n < t.n)
             ORDER BY t.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFTM0', MESSAGE = taken;
        END IF;
    END IF;
    IF p_timers_parked IS NOT NULL THEN
        UPDATE @wf_timers SET parked = p_timers_parked WHERE instance_id = p_id;
    END IF;
    IF p_clear_waits THEN
        DELETE FROM @wf_bookmarks WHERE instance_id = p_id;
        DELETE FROM @wf_timers WHERE instance_id = p_id;
    END IF;
    jrows := cur.journal_rows;
    jstored := cur.journal_stored;
    jfirst := cur.journal_first;
    jlast := cur.journal_last;
    IF jlast IS NULL AND (p_compact_through IS NOT NULL OR p_jn_count > 0
                          OR p_max_journal IS NOT NULL) THEN
        -- Counted once, from rows written before the floor was kept: none is below it.
        SELECT COALESCE(sum(j.last_seq - j.first_seq + 1), 0), min(j.first_seq),
               COALESCE(max(j.last_seq), 0)
          INTO jrows, jfirst, jlast FROM @wf_journal j WHERE j.instance_id = p_id;
        jstored := jrows;
    END IF;
    IF p_compact_through IS NOT NULL THEN
        IF jstored > jrows THEN
            -- The entries below the floor go first, so only kept ones are counted below.
            DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq < jfirst;
            UPDATE @wf_journal SET first_seq = jfirst
             WHERE instance_id = p_id AND first_seq < jfirst AND last_seq >= jfirst;
            jstored := jrows;
        END IF;
        -- The rows wholly up to the summary go, the row it cuts through keeps the rest.
        WITH gone AS (
            DELETE FROM @wf_journal
             WHERE instance_id = p_id AND last_seq <= p_compact_through
            RETURNING last_seq - first_seq + 1 AS n)
        SELECT COALESCE(sum(gone.n), 0) INTO done FROM gone;
        SELECT j.first_seq, j.last_seq INTO v_first, v_last FROM @wf_journal j
         WHERE j.instance_id = p_id AND j.last_seq > p_compact_through
         ORDER BY j.last_seq LIMIT 1;
        IF FOUND AND v_first <= p_compact_through THEN
            UPDATE @wf_journal SET first_seq = p_compact_through + 1
             WHERE instance_id = p_id AND last_seq = v_last;
            done := done + p_compact_through + 1 - v_first;
        END IF;
        INSERT INTO @wf_journal (instance_id, last_seq, first_seq, entries)
        VALUES (p_id, p_compact_through, p_compact_through, p_compact_entries);
        jrows := jrows - done + 1;
        jstored := jrows;
        jfirst := p_compact_through;
        jlast := GREATEST(jlast, p_compact_through);
    END IF;
    IF p_jn_count > 0 THEN
        INSERT INTO @wf_journal (instance_id, last_seq, first_seq, entries)
        VALUES (p_id, jlast + p_jn_count, jlast + 1, p_jn_entries);
        jfirst := COALESCE(jfirst, jlast + 1);
        jlast := jlast + p_jn_count;
        jrows := jrows + p_jn_count;
        jstored := jstored + p_jn_count;
    END IF;
    IF p_max_journal IS NOT NULL AND jrows > p_max_journal THEN
        excess := jrows - p_max_journal;
        IF jlast - jfirst + 1 = jrows THEN
            -- The kept entries are numbered without a gap: the floor rises past the oldest
            -- ones, no row is touched.
            jfirst := jfirst + excess;
            jrows := p_max_journal;
        ELSE
            -- A summary below a gap: the oldest entries first, whole rows deleted, the last
            -- one cut trimmed, after the entries below the floor.
            IF jstored > jrows THEN
                DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq < jfirst;
                UPDATE @wf_journal SET first_seq = jfirst
                 WHERE instance_id = p_id AND first_seq < jfirst AND last_seq >= jfirst;
            END IF;
            LOOP
                SELECT j.first_seq, j.last_seq INTO v_first, v_last FROM @wf_journal j
                 WHERE j.instance_id = p_id ORDER BY j.last_seq LIMIT 1;
                EXIT WHEN NOT FOUND;
                v_count := v_last - v_first + 1;
                IF v_count <= excess THEN
                    DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq = v_last;
                    jrows := jrows - v_count;
                    excess := excess - v_count;
                ELSE
                    UPDATE @wf_journal SET first_seq = v_first + excess
                     WHERE instance_id = p_id AND last_seq = v_last;
                    jrows := jrows - excess;
                    excess := 0;
                END IF;
                EXIT WHEN excess <= 0;
            END LOOP;
            SELECT j.first_seq INTO jfirst FROM @wf_journal j
             WHERE j.instance_id = p_id ORDER BY j.last_seq LIMIT 1;
            jstored := jrows;
        END IF;
    END IF;
    IF jstored - jrows >= GREATEST(64, COALESCE(p_max_journal, 0) / 4) THEN
        -- Enough entries below the floor: their rows go, the row it cuts through is trimmed.
        DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq < jfirst;
        UPDATE @wf_journal SET first_seq = jfirst
         WHERE instance_id = p_id AND first_seq < jfirst AND last_seq >= jfirst;
        jstored := jrows;
    END IF;
    IF cardinality(p_consumed) > 0 THEN
        DELETE FROM @wf_queue WHERE item_id = ANY(p_consumed);
    END IF;
    IF cardinality(p_resolved_ids) > 0 THEN
        UPDATE @wf_incidents x SET resolved_at = p_now, resolution = r.resolution
          FROM unnest(p_resolved_ids, p_resolutions) AS r(id, resolution)
         WHERE x.incident_id = r.id AND x.instance_id = p_id AND x.resolved_at IS NULL;
    END IF;
    IF cardinality(p_control_targets) > 0 THEN
        UPDATE @wf_instances x SET control_request = c.request
          FROM unnest(p_control_targets, p_control_texts) AS c(target, request)
         WHERE x.instance_id = c.target AND x.status NOT IN ('finished', 'cancelled');
    END IF;
    -- A lease the commit would release stays with its holder (until `p_keep_until`) when
    -- asked to keep it and no other process wants it.
    keep := p_release AND p_keep_until IS NOT NULL AND NOT cur.lease_wanted;
    gone := p_release AND NOT keep;
    UPDATE @wf_instances SET
        version = version + 1, state = p_state, state_size = octet_length(p_state),
        status = p_status, sub_status = p_sub_status, correlation_id = p_correlation,
        updated_at = p_now, finished_at = p_finished_at, listing = p_listing,
        journal_rows = jrows, journal_stored = jstored, journal_first = jfirst,
        journal_last = jlast,
        control_request = CASE WHEN p_clear_control THEN NULL ELSE control_request END,
        lease_owner = CASE WHEN gone THEN NULL ELSE lease_owner END,
        lease_expires_at = CASE WHEN gone THEN NULL WHEN keep THEN p_keep_until
                                ELSE lease_expires_at END,
        lease_nonce = CASE WHEN gone THEN NULL ELSE lease_nonce END,
        lease_wanted = CASE WHEN gone THEN FALSE ELSE lease_wanted END
     WHERE instance_id = p_id;
    new_version := cur.version + 1;
    definition := cur.definition_name;
    kept := keep;
    RETURN NEXT;
END
$body$
"#;

/// The lease kept across transitions (ST-38).
///
/// * `lease_wanted`: set by a process that found the lease held by another live owner (a
///   claim, a lease acquisition, a control request); cleared when the lease is taken or
///   given back.
/// * The commit function takes `p_keep_until`: a commit that would release the lease keeps
///   it instead, until then, unless the row's `lease_wanted` is set; it says which in
///   `kept`. The rest of the function is migration 7's.
const MIGRATION_0013: &str = r#"
ALTER TABLE @wf_instances ADD COLUMN lease_wanted BOOLEAN NOT NULL DEFAULT FALSE;

DROP FUNCTION @wf_commit(TEXT, BIGINT, BIGINT, BIGINT, BIGINT, TEXT, TEXT, TEXT, TEXT, BIGINT,
    BOOLEAN, BOOLEAN, TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], BIGINT[], BIGINT[],
    BIGINT[], TEXT[], TEXT[], TEXT[], BIGINT[], BOOLEAN, BOOLEAN, BIGINT, TEXT, BIGINT, TEXT,
    BIGINT, TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT);

CREATE FUNCTION @wf_commit(
    p_id TEXT, p_expected BIGINT, p_token BIGINT, p_nonce BIGINT, p_now BIGINT, p_state TEXT,
    p_status TEXT, p_sub_status TEXT, p_correlation TEXT, p_finished_at BIGINT,
    p_clear_control BOOLEAN, p_release BOOLEAN, p_keep_until BIGINT,
    p_receipts TEXT[], p_bookmarks_removed TEXT[],
    p_bm_ids TEXT[], p_bm_hashes TEXT[], p_bm_names TEXT[], p_bm_nodes TEXT[],
    p_bm_contexts BIGINT[], p_bm_look_backs BIGINT[], p_bm_created BIGINT[],
    p_timers_removed TEXT[], p_tm_ids TEXT[], p_tm_kinds TEXT[], p_tm_due BIGINT[],
    p_timers_parked BOOLEAN, p_clear_waits BOOLEAN,
    p_compact_through BIGINT, p_compact_entries TEXT,
    p_jn_count BIGINT, p_jn_entries TEXT, p_max_journal BIGINT, p_consumed TEXT[],
    p_control_targets TEXT[], p_control_texts TEXT[],
    p_resolved_ids TEXT[], p_resolutions TEXT[],
    p_listing TEXT
) RETURNS TABLE (new_version BIGINT, definition TEXT, kept BOOLEAN)
LANGUAGE plpgsql AS $body$
DECLARE
    cur RECORD;
    taken TEXT;
    fresh TEXT[];
    v_first BIGINT;
    v_last BIGINT;
    v_count BIGINT;
    done BIGINT;
    jrows BIGINT;
    jstored BIGINT;
    jfirst BIGINT;
    jlast BIGINT;
    excess BIGINT;
    keep BOOLEAN;
    gone BOOLEAN;
BEGIN
    SELECT i.version, i.lease_owner, i.lease_token, i.lease_nonce, i.definition_name,
           i.definition_version, i.correlation_id, i.journal_rows, i.journal_stored,
           i.journal_first, i.journal_last, i.lease_wanted
      INTO cur FROM @wf_instances i WHERE i.instance_id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'WFNF0', MESSAGE = p_id;
    END IF;
    IF cur.version <> p_expected THEN
        RAISE EXCEPTION USING ERRCODE = 'WFCF0', MESSAGE = cur.version::TEXT;
    END IF;
    IF cur.lease_owner IS NULL OR cur.lease_token <> p_token
       OR cur.lease_nonce IS DISTINCT FROM p_nonce THEN
        RAISE EXCEPTION USING ERRCODE = 'WFFN0', MESSAGE = cur.lease_token::TEXT;
    END IF;
    IF cardinality(p_receipts) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_receipts (instance_id, stimulus_id, at)
            SELECT p_id, r.s, p_now FROM unnest(p_receipts) AS r(s)
            ON CONFLICT (instance_id, stimulus_id) DO NOTHING
            RETURNING stimulus_id)
        SELECT array_agg(ins.stimulus_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_receipts) THEN
            SELECT r.s INTO taken FROM unnest(p_receipts) WITH ORDINALITY AS r(s, n)
             WHERE fresh IS NULL OR NOT (r.s = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_receipts) WITH ORDINALITY AS d(s, n)
                           WHERE d.s = r.s AND d.n < r.n)
             ORDER BY r.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFRX0', MESSAGE = taken;
        END IF;
    END IF;
    IF cardinality(p_bookmarks_removed) > 0 THEN
        DELETE FROM @wf_bookmarks
         WHERE instance_id = p_id AND bookmark_id = ANY(p_bookmarks_removed);
    END IF;
    IF cardinality(p_bm_ids) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_bookmarks (bookmark_id, instance_id, hash, name, node_id,
                context_id, correlation_id, definition_name, definition_version, look_back,
                created_at)
            SELECT b.id, p_id, b.hash, b.name, b.node, b.context, p_correlation,
                   cur.definition_name, cur.definition_version, b.look_back, b.created
              FROM unnest(p_bm_ids, p_bm_hashes, p_bm_names, p_bm_nodes, p_bm_contexts,
                          p_bm_look_backs, p_bm_created)
                   AS b(id, hash, name, node, context, look_back, created)
            ON CONFLICT (bookmark_id) DO NOTHING
            RETURNING bookmark_id)
        SELECT array_agg(ins.bookmark_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_bm_ids) THEN
            SELECT b.id INTO taken FROM unnest(p_bm_ids) WITH ORDINALITY AS b(id, n)
             WHERE fresh IS NULL OR NOT (b.id = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_bm_ids) WITH ORDINALITY AS d(id, n)
                           WHERE d.id = b.id AND d.n < b.n)
             ORDER BY b.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFBK0', MESSAGE = taken;
        END IF;
    END IF;
    IF cur.correlation_id IS DISTINCT FROM p_correlation THEN
        UPDATE @wf_bookmarks SET correlation_id = p_correlation
         WHERE instance_id = p_id AND correlation_id IS DISTINCT FROM p_correlation;
    END IF;
    IF cardinality(p_timers_removed) > 0 THEN
        DELETE FROM @wf_timers WHERE instance_id = p_id AND timer_id = ANY(p_timers_removed);
    END IF;
    IF cardinality(p_tm_ids) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_timers (timer_id, instance_id, kind, due_at, parked)
            SELECT t.id, p_id, t.kind, t.due, FALSE
              FROM unnest(p_tm_ids, p_tm_kinds, p_tm_due) AS t(id, kind, due)
            ON CONFLICT (timer_id) DO NOTHING
            RETURNING timer_id)
        SELECT array_agg(ins.timer_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_tm_ids) THEN
            SELECT t.id INTO taken FROM unnest(p_tm_ids) WITH ORDINALITY AS t(id, n)
             WHERE fresh IS NULL OR NOT (t.id = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_tm_ids) WITH ORDINALITY AS d(id, n)
                           WHERE d.id = t.id AND d.n < t.n)
             ORDER BY t.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFTM0', MESSAGE = taken;
        END IF;
    END IF;
    IF p_timers_parked IS NOT NULL THEN
        UPDATE @wf_timers SET parked = p_timers_parked WHERE instance_id = p_id;
    END IF;
    IF p_clear_waits THEN
        DELETE FROM @wf_bookmarks WHERE instance_id = p_id;
        DELETE FROM @wf_timers WHERE instance_id = p_id;
    END IF;
    jrows := cur.journal_rows;
    jstored := cur.journal_stored;
    jfirst := cur.journal_first;
    jlast := cur.journal_last;
    IF jlast IS NULL AND (p_compact_through IS NOT NULL OR p_jn_count > 0
                          OR p_max_journal IS NOT NULL) THEN
        -- Counted once, from rows written before the floor was kept: none is below it.
        SELECT COALESCE(sum(j.last_seq - j.first_seq + 1), 0), min(j.first_seq),
               COALESCE(max(j.last_seq), 0)
          INTO jrows, jfirst, jlast FROM @wf_journal j WHERE j.instance_id = p_id;
        jstored := jrows;
    END IF;
    IF p_compact_through IS NOT NULL THEN
        IF jstored > jrows THEN
            -- The entries below the floor go first, so only kept ones are counted below.
            DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq < jfirst;
            UPDATE @wf_journal SET first_seq = jfirst
             WHERE instance_id = p_id AND first_seq < jfirst AND last_seq >= jfirst;
            jstored := jrows;
        END IF;
        -- The rows wholly up to the summary go, the row it cuts through keeps the rest.
        WITH gone AS (
            DELETE FROM @wf_journal
             WHERE instance_id = p_id AND last_seq <= p_compact_through
            RETURNING last_seq - first_seq + 1 AS n)
        SELECT COALESCE(sum(gone.n), 0) INTO done FROM gone;
        SELECT j.first_seq, j.last_seq INTO v_first, v_last FROM @wf_journal j
         WHERE j.instance_id = p_id AND j.last_seq > p_compact_through
         ORDER BY j.last_seq LIMIT 1;
        IF FOUND AND v_first <= p_compact_through THEN
            UPDATE @wf_journal SET first_seq = p_compact_through + 1
             WHERE instance_id = p_id AND last_seq = v_last;
            done := done + p_compact_through + 1 - v_first;
        END IF;
        INSERT INTO @wf_journal (instance_id, last_seq, first_seq, entries)
        VALUES (p_id, p_compact_through, p_compact_through, p_compact_entries);
        jrows := jrows - done + 1;
        jstored := jrows;
        jfirst := p_compact_through;
        jlast := GREATEST(jlast, p_compact_through);
    END IF;
    IF p_jn_count > 0 THEN
        INSERT INTO @wf_journal (instance_id, last_seq, first_seq, entries)
        VALUES (p_id, jlast + p_jn_count, jlast + 1, p_jn_entries);
        jfirst := COALESCE(jfirst, jlast + 1);
        jlast := jlast + p_jn_count;
        jrows := jrows + p_jn_count;
        jstored := jstored + p_jn_count;
    END IF;
    IF p_max_journal IS NOT NULL AND jrows > p_max_journal THEN
        excess := jrows - p_max_journal;
        IF jlast - jfirst + 1 = jrows THEN
            -- The kept entries are numbered without a gap: the floor rises past the oldest
            -- ones, no row is touched.
            jfirst := jfirst + excess;
            jrows := p_max_journal;
        ELSE
            -- A summary below a gap: the oldest entries first, whole rows deleted, the last
            -- one cut trimmed, after the entries below the floor.
            IF jstored > jrows THEN
                DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq < jfirst;
                UPDATE @wf_journal SET first_seq = jfirst
                 WHERE instance_id = p_id AND first_seq < jfirst AND last_seq >= jfirst;
            END IF;
            LOOP
                SELECT j.first_seq, j.last_seq INTO v_first, v_last FROM @wf_journal j
                 WHERE j.instance_id = p_id ORDER BY j.last_seq LIMIT 1;
                EXIT WHEN NOT FOUND;
                v_count := v_last - v_first + 1;
                IF v_count <= excess THEN
                    DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq = v_last;
                    jrows := jrows - v_count;
                    excess := excess - v_count;
                ELSE
                    UPDATE @wf_journal SET first_seq = v_first + excess
                     WHERE instance_id = p_id AND last_seq = v_last;
                    jrows := jrows - excess;
                    excess := 0;
                END IF;
                EXIT WHEN excess <= 0;
            END LOOP;
            SELECT j.first_seq INTO jfirst FROM @wf_journal j
             WHERE j.instance_id = p_id ORDER BY j.last_seq LIMIT 1;
            jstored := jrows;
        END IF;
    END IF;
    IF jstored - jrows >= GREATEST(64, COALESCE(p_max_journal, 0) / 4) THEN
        -- Enough entries below the floor: their rows go, the row it cuts through is trimmed.
        DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq < jfirst;
        UPDATE @wf_journal SET first_seq = jfirst
         WHERE instance_id = p_id AND first_seq < jfirst AND last_seq >= jfirst;
        jstored := jrows;
    END IF;
    IF cardinality(p_consumed) > 0 THEN
        DELETE FROM @wf_queue WHERE item_id = ANY(p_consumed);
    END IF;
    IF cardinality(p_resolved_ids) > 0 THEN
        UPDATE @wf_incidents x SET resolved_at = p_now, resolution = r.resolution
          FROM unnest(p_resolved_ids, p_resolutions) AS r(id, resolution)
         WHERE x.incident_id = r.id AND x.instance_id = p_id AND x.resolved_at IS NULL;
    END IF;
    IF cardinality(p_control_targets) > 0 THEN
        UPDATE @wf_instances x SET control_request = c.request
          FROM unnest(p_control_targets, p_control_texts) AS c(target, request)
         WHERE x.instance_id = c.target AND x.status NOT IN ('finished', 'cancelled');
    END IF;
    -- A lease the commit would release stays with its holder (until `p_keep_until`) when
    -- asked to keep it and no other process wants it.
    keep := p_release AND p_keep_until IS NOT NULL AND NOT cur.lease_wanted;
    gone := p_release AND NOT keep;
    UPDATE @wf_instances SET
        version = version + 1, state = p_state, state_size = octet_length(p_state),
        status = p_status, sub_status = p_sub_status, correlation_id = p_correlation,
        updated_at = p_now, finished_at = p_finished_at, listing = p_listing,
        journal_rows = jrows, journal_stored = jstored, journal_first = jfirst,
        journal_last = jlast,
        control_request = CASE WHEN p_clear_control THEN NULL ELSE control_request END,
        lease_owner = CASE WHEN gone THEN NULL ELSE lease_owner END,
        lease_expires_at = CASE WHEN gone THEN NULL WHEN keep THEN p_keep_until
                                ELSE lease_expires_at END,
        lease_nonce = CASE WHEN gone THEN NULL ELSE lease_nonce END,
        lease_wanted = CASE WHEN gone THEN FALSE ELSE lease_wanted END
     WHERE instance_id = p_id;
    new_version := cur.version + 1;
    definition := cur.definition_name;
    kept := keep;
    RETURN NEXT;
END
$body$
"#;

/// The key index (RT-36): each key digest an instance's waits carried, with the instance,
/// so a send by key that no instance waits for can name the instances with its key. Kept
/// until the instance is purged.
const MIGRATION_0012: &str = r"
CREATE TABLE @wf_keys (
    key         TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    PRIMARY KEY (key, instance_id)
);
CREATE INDEX wf_keys_instance ON @wf_keys (instance_id);
";

/// Receipts found by their stimulus (RT-19): a queued stimulus routed again after a crash
/// between its delivery and its acknowledgement is known consumed.
const MIGRATION_0011: &str = r"
CREATE INDEX wf_receipts_stimulus ON @wf_receipts (stimulus_id);
";

/// Flow-control queues (QU-5, QU-6): per queue a row of counters (the last fencing token,
/// waiter sequence and round-robin turn issued) and the limits last asked with, which every
/// operation on the queue locks first; slot rows (one per holder, leased, with a fencing
/// token); waiter rows (the line); the turn each partition key was last served at; and the
/// grants of the rate window.
const MIGRATION_0008: &str = r#"
CREATE TABLE @wf_flow_queues (
    name        TEXT PRIMARY KEY,
    last_token  BIGINT NOT NULL,
    last_seq    BIGINT NOT NULL,
    last_turn   BIGINT NOT NULL,
    concurrency BIGINT,
    per_process BIGINT,
    per_key     BIGINT,
    rate_starts BIGINT,
    rate_period BIGINT
);

CREATE TABLE @wf_flow_slots (
    queue         TEXT NOT NULL,
    holder        TEXT NOT NULL,
    owner         TEXT NOT NULL,
    partition_key TEXT,
    token         BIGINT NOT NULL,
    acquired_at   BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    PRIMARY KEY (queue, holder)
);

CREATE TABLE @wf_flow_waiters (
    queue         TEXT NOT NULL,
    holder        TEXT NOT NULL,
    partition_key TEXT,
    priority      BIGINT NOT NULL,
    seq           BIGINT NOT NULL,
    enqueued_at   BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    PRIMARY KEY (queue, holder)
);

CREATE TABLE @wf_flow_turns (
    queue         TEXT NOT NULL,
    partition_key TEXT NOT NULL,
    turn          BIGINT NOT NULL,
    PRIMARY KEY (queue, partition_key)
);

CREATE TABLE @wf_flow_starts (
    queue TEXT NOT NULL,
    token BIGINT NOT NULL,
    at    BIGINT NOT NULL,
    PRIMARY KEY (queue, token)
);

CREATE INDEX wf_flow_starts_at ON @wf_flow_starts (queue, at);
"#;

/// The owners holding a liveness lock (ST-36, see `liveness.rs`): a registered owner whose
/// session-level advisory lock is free is dead, and what it holds is taken over at once.
const MIGRATION_0009: &str = r#"
CREATE TABLE @wf_processes (
    owner TEXT COLLATE "C" PRIMARY KEY,
    since BIGINT NOT NULL
);
"#;

/// Debounced sends (RT-35, C-44): one row per debounce id, holding the last send, claimed
/// by the process that delivers it once due.
const MIGRATION_0010: &str = r#"
CREATE TABLE @wf_debounce (
    debounce_id      TEXT COLLATE "C" PRIMARY KEY NOT NULL,
    burst_id         TEXT NOT NULL,
    name             TEXT NOT NULL,
    hash             TEXT NOT NULL,
    stimulus         TEXT NOT NULL,
    first_sent_at    BIGINT NOT NULL,
    last_sent_at     BIGINT NOT NULL,
    due_at           BIGINT NOT NULL,
    sends            BIGINT NOT NULL,
    claim_owner      TEXT,
    claim_expires_at BIGINT
);
CREATE INDEX wf_debounce_due ON @wf_debounce (due_at, debounce_id);
"#;

/// The instance row updated in place (a HOT update) by a commit that leaves its indexed
/// columns as they were, the common transition of a waiting instance:
///
/// * The runnable-instances index (ST-15: `claim_runnable` takes the oldest `updated_at`
///   first) had `updated_at` as a key, and every commit changes it, so no commit could be a
///   HOT update: each of the table's six indexes got a new entry per commit. Its key is now
///   `runnable_at`, a stored generated column that is `updated_at` while the instance is
///   running and `NULL` otherwise, with the partial predicate on that column alone: a commit
///   of an instance that is not running (and stays so) changes no indexed value. The order
///   of the claims is the same, `runnable_at` being `updated_at` for every row the index
///   holds.
/// * The table keeps 30% of each page free (`fillfactor`), so the new version of an
///   updated row finds room on its own page; the generated column rewrites the table, so
///   the existing rows are laid out with that room too.
const MIGRATION_0006: &str = r#"
ALTER TABLE @wf_instances SET (fillfactor = 70);

ALTER TABLE @wf_instances ADD COLUMN runnable_at BIGINT
    GENERATED ALWAYS AS (CASE WHEN status = 'running' THEN updated_at END) STORED;

DROP INDEX @wf_instances_runnable;

CREATE INDEX wf_instances_runnable ON @wf_instances (runnable_at, instance_id)
    WHERE runnable_at IS NOT NULL;
"#;

/// The journal cap (ENG-42) amortised: most commits of an instance at its cap run none of its
/// statements (ST-10).
///
/// * The instance row keeps `journal_first`, the oldest journal entry kept (the floor),
///   `journal_last`, the newest entry's seq (so an append needs no `max` of the journal's
///   keys), and `journal_stored`, the entries the rows hold, those below the floor included
///   (`journal_rows` still counts the kept ones). All are counted once, from the rows, for an
///   instance journalled before this migration (none of its rows is below a floor then).
/// * At the cap, a commit of an instance whose kept entries are numbered without a gap (all
///   but one with a compaction's summary below entries the cap removed) raises the floor
///   past the excess and touches no journal row. The rows below it are deleted, and the row
///   the floor cuts through trimmed, once they hold `max(64, cap / 4)` entries or more, in
///   one range `DELETE` and one `UPDATE`: the rows stored stay below the cap plus that
///   slack. Readers start at the floor, so what they see is the newest `cap` entries as
///   before, entry for entry. A compaction, and the cap where a summary lies below a gap,
///   delete the rows below the floor first, then work as before.
const MIGRATION_0007: &str = r#"
ALTER TABLE @wf_instances ADD COLUMN journal_first BIGINT;

ALTER TABLE @wf_instances ADD COLUMN journal_last BIGINT;

ALTER TABLE @wf_instances ADD COLUMN journal_stored BIGINT;

CREATE OR REPLACE FUNCTION @wf_commit(
    p_id TEXT, p_expected BIGINT, p_token BIGINT, p_nonce BIGINT, p_now BIGINT, p_state TEXT,
    p_status TEXT, p_sub_status TEXT, p_correlation TEXT, p_finished_at BIGINT,
    p_clear_control BOOLEAN, p_release BOOLEAN,
    p_receipts TEXT[], p_bookmarks_removed TEXT[],
    p_bm_ids TEXT[], p_bm_hashes TEXT[], p_bm_names TEXT[], p_bm_nodes TEXT[],
    p_bm_contexts BIGINT[], p_bm_look_backs BIGINT[], p_bm_created BIGINT[],
    p_timers_removed TEXT[], p_tm_ids TEXT[], p_tm_kinds TEXT[], p_tm_due BIGINT[],
    p_timers_parked BOOLEAN, p_clear_waits BOOLEAN,
    p_compact_through BIGINT, p_compact_entries TEXT,
    p_jn_count BIGINT, p_jn_entries TEXT, p_max_journal BIGINT, p_consumed TEXT[],
    p_control_targets TEXT[], p_control_texts TEXT[],
    p_resolved_ids TEXT[], p_resolutions TEXT[],
    p_listing TEXT
) RETURNS TABLE (new_version BIGINT, definition TEXT)
LANGUAGE plpgsql AS $body$
DECLARE
    cur RECORD;
    taken TEXT;
    fresh TEXT[];
    v_first BIGINT;
    v_last BIGINT;
    v_count BIGINT;
    done BIGINT;
    jrows BIGINT;
    jstored BIGINT;
    jfirst BIGINT;
    jlast BIGINT;
    excess BIGINT;
BEGIN
    SELECT i.version, i.lease_owner, i.lease_token, i.lease_nonce, i.definition_name,
           i.definition_version, i.correlation_id, i.journal_rows, i.journal_stored,
           i.journal_first, i.journal_last
      INTO cur FROM @wf_instances i WHERE i.instance_id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'WFNF0', MESSAGE = p_id;
    END IF;
    IF cur.version <> p_expected THEN
        RAISE EXCEPTION USING ERRCODE = 'WFCF0', MESSAGE = cur.version::TEXT;
    END IF;
    IF cur.lease_owner IS NULL OR cur.lease_token <> p_token
       OR cur.lease_nonce IS DISTINCT FROM p_nonce THEN
        RAISE EXCEPTION USING ERRCODE = 'WFFN0', MESSAGE = cur.lease_token::TEXT;
    END IF;
    IF cardinality(p_receipts) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_receipts (instance_id, stimulus_id, at)
            SELECT p_id, r.s, p_now FROM unnest(p_receipts) AS r(s)
            ON CONFLICT (instance_id, stimulus_id) DO NOTHING
            RETURNING stimulus_id)
        SELECT array_agg(ins.stimulus_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_receipts) THEN
            SELECT r.s INTO taken FROM unnest(p_receipts) WITH ORDINALITY AS r(s, n)
             WHERE fresh IS NULL OR NOT (r.s = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_receipts) WITH ORDINALITY AS d(s, n)
                           WHERE d.s = r.s AND d.n < r.n)
             ORDER BY r.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFRX0', MESSAGE = taken;
        END IF;
    END IF;
    IF cardinality(p_bookmarks_removed) > 0 THEN
        DELETE FROM @wf_bookmarks
         WHERE instance_id = p_id AND bookmark_id = ANY(p_bookmarks_removed);
    END IF;
    IF cardinality(p_bm_ids) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_bookmarks (bookmark_id, instance_id, hash, name, node_id,
                context_id, correlation_id, definition_name, definition_version, look_back,
                created_at)
            SELECT b.id, p_id, b.hash, b.name, b.node, b.context, p_correlation,
                   cur.definition_name, cur.definition_version, b.look_back, b.created
              FROM unnest(p_bm_ids, p_bm_hashes, p_bm_names, p_bm_nodes, p_bm_contexts,
                          p_bm_look_backs, p_bm_created)
                   AS b(id, hash, name, node, context, look_back, created)
            ON CONFLICT (bookmark_id) DO NOTHING
            RETURNING bookmark_id)
        SELECT array_agg(ins.bookmark_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_bm_ids) THEN
            SELECT b.id INTO taken FROM unnest(p_bm_ids) WITH ORDINALITY AS b(id, n)
             WHERE fresh IS NULL OR NOT (b.id = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_bm_ids) WITH ORDINALITY AS d(id, n)
                           WHERE d.id = b.id AND d.n < b.n)
             ORDER BY b.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFBK0', MESSAGE = taken;
        END IF;
    END IF;
    IF cur.correlation_id IS DISTINCT FROM p_correlation THEN
        UPDATE @wf_bookmarks SET correlation_id = p_correlation
         WHERE instance_id = p_id AND correlation_id IS DISTINCT FROM p_correlation;
    END IF;
    IF cardinality(p_timers_removed) > 0 THEN
        DELETE FROM @wf_timers WHERE instance_id = p_id AND timer_id = ANY(p_timers_removed);
    END IF;
    IF cardinality(p_tm_ids) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_timers (timer_id, instance_id, kind, due_at, parked)
            SELECT t.id, p_id, t.kind, t.due, FALSE
              FROM unnest(p_tm_ids, p_tm_kinds, p_tm_due) AS t(id, kind, due)
            ON CONFLICT (timer_id) DO NOTHING
            RETURNING timer_id)
        SELECT array_agg(ins.timer_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_tm_ids) THEN
            SELECT t.id INTO taken FROM unnest(p_tm_ids) WITH ORDINALITY AS t(id, n)
             WHERE fresh IS NULL OR NOT (t.id = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_tm_ids) WITH ORDINALITY AS d(id, n)
                           WHERE d.id = t.id AND d.n < t.n)
             ORDER BY t.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFTM0', MESSAGE = taken;
        END IF;
    END IF;
    IF p_timers_parked IS NOT NULL THEN
        UPDATE @wf_timers SET parked = p_timers_parked WHERE instance_id = p_id;
    END IF;
    IF p_clear_waits THEN
        DELETE FROM @wf_bookmarks WHERE instance_id = p_id;
        DELETE FROM @wf_timers WHERE instance_id = p_id;
    END IF;
    jrows := cur.journal_rows;
    jstored := cur.journal_stored;
    jfirst := cur.journal_first;
    jlast := cur.journal_last;
    IF jlast IS NULL AND (p_compact_through IS NOT NULL OR p_jn_count > 0
                          OR p_max_journal IS NOT NULL) THEN
        -- Counted once, from rows written before the floor was kept: none is below it.
        SELECT COALESCE(sum(j.last_seq - j.first_seq + 1), 0), min(j.first_seq),
               COALESCE(max(j.last_seq), 0)
          INTO jrows, jfirst, jlast FROM @wf_journal j WHERE j.instance_id = p_id;
        jstored := jrows;
    END IF;
    IF p_compact_through IS NOT NULL THEN
        IF jstored > jrows THEN
            -- The entries below the floor go first, so only kept ones are counted below.
            DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq < jfirst;
            UPDATE @wf_journal SET first_seq = jfirst
             WHERE instance_id = p_id AND first_seq < jfirst AND last_seq >= jfirst;
            jstored := jrows;
        END IF;
        -- The rows wholly up to the summary go, the row it cuts through keeps the rest.
        WITH gone AS (
            DELETE FROM @wf_journal
             WHERE instance_id = p_id AND last_seq <= p_compact_through
            RETURNING last_seq - first_seq + 1 AS n)
        SELECT COALESCE(sum(gone.n), 0) INTO done FROM gone;
        SELECT j.first_seq, j.last_seq INTO v_first, v_last FROM @wf_journal j
         WHERE j.instance_id = p_id AND j.last_seq > p_compact_through
         ORDER BY j.last_seq LIMIT 1;
        IF FOUND AND v_first <= p_compact_through THEN
            UPDATE @wf_journal SET first_seq = p_compact_through + 1
             WHERE instance_id = p_id AND last_seq = v_last;
            done := done + p_compact_through + 1 - v_first;
        END IF;
        INSERT INTO @wf_journal (instance_id, last_seq, first_seq, entries)
        VALUES (p_id, p_compact_through, p_compact_through, p_compact_entries);
        jrows := jrows - done + 1;
        jstored := jrows;
        jfirst := p_compact_through;
        jlast := GREATEST(jlast, p_compact_through);
    END IF;
    IF p_jn_count > 0 THEN
        INSERT INTO @wf_journal (instance_id, last_seq, first_seq, entries)
        VALUES (p_id, jlast + p_jn_count, jlast + 1, p_jn_entries);
        jfirst := COALESCE(jfirst, jlast + 1);
        jlast := jlast + p_jn_count;
        jrows := jrows + p_jn_count;
        jstored := jstored + p_jn_count;
    END IF;
    IF p_max_journal IS NOT NULL AND jrows > p_max_journal THEN
        excess := jrows - p_max_journal;
        IF jlast - jfirst + 1 = jrows THEN
            -- The kept entries are numbered without a gap: the floor rises past the oldest
            -- ones, no row is touched.
            jfirst := jfirst + excess;
            jrows := p_max_journal;
        ELSE
            -- A summary below a gap: the oldest entries first, whole rows deleted, the last
            -- one cut trimmed, after the entries below the floor.
            IF jstored > jrows THEN
                DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq < jfirst;
                UPDATE @wf_journal SET first_seq = jfirst
                 WHERE instance_id = p_id AND first_seq < jfirst AND last_seq >= jfirst;
            END IF;
            LOOP
                SELECT j.first_seq, j.last_seq INTO v_first, v_last FROM @wf_journal j
                 WHERE j.instance_id = p_id ORDER BY j.last_seq LIMIT 1;
                EXIT WHEN NOT FOUND;
                v_count := v_last - v_first + 1;
                IF v_count <= excess THEN
                    DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq = v_last;
                    jrows := jrows - v_count;
                    excess := excess - v_count;
                ELSE
                    UPDATE @wf_journal SET first_seq = v_first + excess
                     WHERE instance_id = p_id AND last_seq = v_last;
                    jrows := jrows - excess;
                    excess := 0;
                END IF;
                EXIT WHEN excess <= 0;
            END LOOP;
            SELECT j.first_seq INTO jfirst FROM @wf_journal j
             WHERE j.instance_id = p_id ORDER BY j.last_seq LIMIT 1;
            jstored := jrows;
        END IF;
    END IF;
    IF jstored - jrows >= GREATEST(64, COALESCE(p_max_journal, 0) / 4) THEN
        -- Enough entries below the floor: their rows go, the row it cuts through is trimmed.
        DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq < jfirst;
        UPDATE @wf_journal SET first_seq = jfirst
         WHERE instance_id = p_id AND first_seq < jfirst AND last_seq >= jfirst;
        jstored := jrows;
    END IF;
    IF cardinality(p_consumed) > 0 THEN
        DELETE FROM @wf_queue WHERE item_id = ANY(p_consumed);
    END IF;
    IF cardinality(p_resolved_ids) > 0 THEN
        UPDATE @wf_incidents x SET resolved_at = p_now, resolution = r.resolution
          FROM unnest(p_resolved_ids, p_resolutions) AS r(id, resolution)
         WHERE x.incident_id = r.id AND x.instance_id = p_id AND x.resolved_at IS NULL;
    END IF;
    IF cardinality(p_control_targets) > 0 THEN
        UPDATE @wf_instances x SET control_request = c.request
          FROM unnest(p_control_targets, p_control_texts) AS c(target, request)
         WHERE x.instance_id = c.target AND x.status NOT IN ('finished', 'cancelled');
    END IF;
    UPDATE @wf_instances SET
        version = version + 1, state = p_state, state_size = octet_length(p_state),
        status = p_status, sub_status = p_sub_status, correlation_id = p_correlation,
        updated_at = p_now, finished_at = p_finished_at, listing = p_listing,
        journal_rows = jrows, journal_stored = jstored, journal_first = jfirst,
        journal_last = jlast,
        control_request = CASE WHEN p_clear_control THEN NULL ELSE control_request END,
        lease_owner = CASE WHEN p_release THEN NULL ELSE lease_owner END,
        lease_expires_at = CASE WHEN p_release THEN NULL ELSE lease_expires_at END,
        lease_nonce = CASE WHEN p_release THEN NULL ELSE lease_nonce END
     WHERE instance_id = p_id;
    new_version := cur.version + 1;
    definition := cur.definition_name;
    RETURN NEXT;
END
$body$
"#;

/// The journal as one row per commit (ST-10), and the commit function that writes it so.
///
/// * A row is keyed by (instance, `last_seq`), the seq of its newest entry, and holds the
///   commit's entries as one JSON array (`entries`, built by the store) and `first_seq`, its
///   oldest entry still kept: a transition that journals six entries writes one row and one
///   index entry instead of six. Each row of the previous form becomes a row of one entry,
///   its values unchanged.
/// * The commit function takes a commit's entries as that text and their count, a
///   compaction's summary likewise; `journal_rows` counts entries as before (the entries of
///   the rows kept). The cap (ENG-42) deletes the oldest rows wholly in the excess and raises
///   `first_seq` of the row it cuts through (an update of a column no index has, so it can
///   stay on its page); a compaction does the same up to its summary, a row of its own.
const MIGRATION_0005: &str = r#"
CREATE TABLE @wf_journal_rows (
    instance_id TEXT COLLATE "C" NOT NULL,
    last_seq    BIGINT NOT NULL,
    first_seq   BIGINT NOT NULL,
    entries     TEXT NOT NULL,
    PRIMARY KEY (instance_id, last_seq)
);

INSERT INTO @wf_journal_rows (instance_id, last_seq, first_seq, entries)
SELECT instance_id, seq, seq,
       json_build_array(json_build_array(at, kind, context_id, node_id, detail))::TEXT
  FROM @wf_journal;

DROP TABLE @wf_journal;

ALTER TABLE @wf_journal_rows RENAME TO wf_journal;

DROP FUNCTION @wf_commit(
    TEXT, BIGINT, BIGINT, BIGINT, BIGINT, TEXT, TEXT, TEXT, TEXT, BIGINT, BOOLEAN, BOOLEAN,
    TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], BIGINT[], BIGINT[], BIGINT[],
    TEXT[], TEXT[], TEXT[], BIGINT[], BOOLEAN, BOOLEAN,
    BIGINT, BIGINT, TEXT, BIGINT, TEXT, TEXT,
    BIGINT[], TEXT[], BIGINT[], TEXT[], TEXT[], BIGINT, TEXT[],
    TEXT[], TEXT[], TEXT[], TEXT[], TEXT);

CREATE FUNCTION @wf_commit(
    p_id TEXT, p_expected BIGINT, p_token BIGINT, p_nonce BIGINT, p_now BIGINT, p_state TEXT,
    p_status TEXT, p_sub_status TEXT, p_correlation TEXT, p_finished_at BIGINT,
    p_clear_control BOOLEAN, p_release BOOLEAN,
    p_receipts TEXT[], p_bookmarks_removed TEXT[],
    p_bm_ids TEXT[], p_bm_hashes TEXT[], p_bm_names TEXT[], p_bm_nodes TEXT[],
    p_bm_contexts BIGINT[], p_bm_look_backs BIGINT[], p_bm_created BIGINT[],
    p_timers_removed TEXT[], p_tm_ids TEXT[], p_tm_kinds TEXT[], p_tm_due BIGINT[],
    p_timers_parked BOOLEAN, p_clear_waits BOOLEAN,
    p_compact_through BIGINT, p_compact_entries TEXT,
    p_jn_count BIGINT, p_jn_entries TEXT, p_max_journal BIGINT, p_consumed TEXT[],
    p_control_targets TEXT[], p_control_texts TEXT[],
    p_resolved_ids TEXT[], p_resolutions TEXT[],
    p_listing TEXT
) RETURNS TABLE (new_version BIGINT, definition TEXT)
LANGUAGE plpgsql AS $body$
DECLARE
    cur RECORD;
    taken TEXT;
    fresh TEXT[];
    v_first BIGINT;
    v_last BIGINT;
    v_count BIGINT;
    done BIGINT;
    jrows BIGINT;
    excess BIGINT;
BEGIN
    SELECT i.version, i.lease_owner, i.lease_token, i.lease_nonce, i.definition_name,
           i.definition_version, i.correlation_id, i.journal_rows
      INTO cur FROM @wf_instances i WHERE i.instance_id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'WFNF0', MESSAGE = p_id;
    END IF;
    IF cur.version <> p_expected THEN
        RAISE EXCEPTION USING ERRCODE = 'WFCF0', MESSAGE = cur.version::TEXT;
    END IF;
    IF cur.lease_owner IS NULL OR cur.lease_token <> p_token
       OR cur.lease_nonce IS DISTINCT FROM p_nonce THEN
        RAISE EXCEPTION USING ERRCODE = 'WFFN0', MESSAGE = cur.lease_token::TEXT;
    END IF;
    IF cardinality(p_receipts) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_receipts (instance_id, stimulus_id, at)
            SELECT p_id, r.s, p_now FROM unnest(p_receipts) AS r(s)
            ON CONFLICT (instance_id, stimulus_id) DO NOTHING
            RETURNING stimulus_id)
        SELECT array_agg(ins.stimulus_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_receipts) THEN
            SELECT r.s INTO taken FROM unnest(p_receipts) WITH ORDINALITY AS r(s, n)
             WHERE fresh IS NULL OR NOT (r.s = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_receipts) WITH ORDINALITY AS d(s, n)
                           WHERE d.s = r.s AND d.n < r.n)
             ORDER BY r.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFRX0', MESSAGE = taken;
        END IF;
    END IF;
    IF cardinality(p_bookmarks_removed) > 0 THEN
        DELETE FROM @wf_bookmarks
         WHERE instance_id = p_id AND bookmark_id = ANY(p_bookmarks_removed);
    END IF;
    IF cardinality(p_bm_ids) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_bookmarks (bookmark_id, instance_id, hash, name, node_id,
                context_id, correlation_id, definition_name, definition_version, look_back,
                created_at)
            SELECT b.id, p_id, b.hash, b.name, b.node, b.context, p_correlation,
                   cur.definition_name, cur.definition_version, b.look_back, b.created
              FROM unnest(p_bm_ids, p_bm_hashes, p_bm_names, p_bm_nodes, p_bm_contexts,
                          p_bm_look_backs, p_bm_created)
                   AS b(id, hash, name, node, context, look_back, created)
            ON CONFLICT (bookmark_id) DO NOTHING
            RETURNING bookmark_id)
        SELECT array_agg(ins.bookmark_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_bm_ids) THEN
            SELECT b.id INTO taken FROM unnest(p_bm_ids) WITH ORDINALITY AS b(id, n)
             WHERE fresh IS NULL OR NOT (b.id = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_bm_ids) WITH ORDINALITY AS d(id, n)
                           WHERE d.id = b.id AND d.n < b.n)
             ORDER BY b.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFBK0', MESSAGE = taken;
        END IF;
    END IF;
    IF cur.correlation_id IS DISTINCT FROM p_correlation THEN
        UPDATE @wf_bookmarks SET correlation_id = p_correlation
         WHERE instance_id = p_id AND correlation_id IS DISTINCT FROM p_correlation;
    END IF;
    IF cardinality(p_timers_removed) > 0 THEN
        DELETE FROM @wf_timers WHERE instance_id = p_id AND timer_id = ANY(p_timers_removed);
    END IF;
    IF cardinality(p_tm_ids) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_timers (timer_id, instance_id, kind, due_at, parked)
            SELECT t.id, p_id, t.kind, t.due, FALSE
              FROM unnest(p_tm_ids, p_tm_kinds, p_tm_due) AS t(id, kind, due)
            ON CONFLICT (timer_id) DO NOTHING
            RETURNING timer_id)
        SELECT array_agg(ins.timer_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_tm_ids) THEN
            SELECT t.id INTO taken FROM unnest(p_tm_ids) WITH ORDINALITY AS t(id, n)
             WHERE fresh IS NULL OR NOT (t.id = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_tm_ids) WITH ORDINALITY AS d(id, n)
                           WHERE d.id = t.id AND d.n < t.n)
             ORDER BY t.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFTM0', MESSAGE = taken;
        END IF;
    END IF;
    IF p_timers_parked IS NOT NULL THEN
        UPDATE @wf_timers SET parked = p_timers_parked WHERE instance_id = p_id;
    END IF;
    IF p_clear_waits THEN
        DELETE FROM @wf_bookmarks WHERE instance_id = p_id;
        DELETE FROM @wf_timers WHERE instance_id = p_id;
    END IF;
    jrows := cur.journal_rows;
    IF jrows IS NULL AND (p_compact_through IS NOT NULL OR p_jn_count > 0
                          OR p_max_journal IS NOT NULL) THEN
        SELECT COALESCE(sum(j.last_seq - j.first_seq + 1), 0) INTO jrows
          FROM @wf_journal j WHERE j.instance_id = p_id;
    END IF;
    IF p_compact_through IS NOT NULL THEN
        -- The rows wholly up to the summary go, the row it cuts through keeps the rest.
        WITH gone AS (
            DELETE FROM @wf_journal
             WHERE instance_id = p_id AND last_seq <= p_compact_through
            RETURNING last_seq - first_seq + 1 AS n)
        SELECT COALESCE(sum(gone.n), 0) INTO done FROM gone;
        SELECT j.first_seq, j.last_seq INTO v_first, v_last FROM @wf_journal j
         WHERE j.instance_id = p_id AND j.last_seq > p_compact_through
         ORDER BY j.last_seq LIMIT 1;
        IF FOUND AND v_first <= p_compact_through THEN
            UPDATE @wf_journal SET first_seq = p_compact_through + 1
             WHERE instance_id = p_id AND last_seq = v_last;
            done := done + p_compact_through + 1 - v_first;
        END IF;
        INSERT INTO @wf_journal (instance_id, last_seq, first_seq, entries)
        VALUES (p_id, p_compact_through, p_compact_through, p_compact_entries);
        jrows := jrows - done + 1;
    END IF;
    IF p_jn_count > 0 THEN
        SELECT COALESCE(MAX(j.last_seq), 0) INTO v_last FROM @wf_journal j
         WHERE j.instance_id = p_id;
        INSERT INTO @wf_journal (instance_id, last_seq, first_seq, entries)
        VALUES (p_id, v_last + p_jn_count, v_last + 1, p_jn_entries);
        jrows := jrows + p_jn_count;
    END IF;
    IF p_max_journal IS NOT NULL AND jrows > p_max_journal THEN
        -- The oldest entries first: whole rows deleted, the last one cut trimmed.
        excess := jrows - p_max_journal;
        LOOP
            SELECT j.first_seq, j.last_seq INTO v_first, v_last FROM @wf_journal j
             WHERE j.instance_id = p_id ORDER BY j.last_seq LIMIT 1;
            EXIT WHEN NOT FOUND;
            v_count := v_last - v_first + 1;
            IF v_count <= excess THEN
                DELETE FROM @wf_journal WHERE instance_id = p_id AND last_seq = v_last;
                jrows := jrows - v_count;
                excess := excess - v_count;
            ELSE
                UPDATE @wf_journal SET first_seq = v_first + excess
                 WHERE instance_id = p_id AND last_seq = v_last;
                jrows := jrows - excess;
                excess := 0;
            END IF;
            EXIT WHEN excess <= 0;
        END LOOP;
    END IF;
    IF cardinality(p_consumed) > 0 THEN
        DELETE FROM @wf_queue WHERE item_id = ANY(p_consumed);
    END IF;
    IF cardinality(p_resolved_ids) > 0 THEN
        UPDATE @wf_incidents x SET resolved_at = p_now, resolution = r.resolution
          FROM unnest(p_resolved_ids, p_resolutions) AS r(id, resolution)
         WHERE x.incident_id = r.id AND x.instance_id = p_id AND x.resolved_at IS NULL;
    END IF;
    IF cardinality(p_control_targets) > 0 THEN
        UPDATE @wf_instances x SET control_request = c.request
          FROM unnest(p_control_targets, p_control_texts) AS c(target, request)
         WHERE x.instance_id = c.target AND x.status NOT IN ('finished', 'cancelled');
    END IF;
    UPDATE @wf_instances SET
        version = version + 1, state = p_state, state_size = octet_length(p_state),
        status = p_status, sub_status = p_sub_status, correlation_id = p_correlation,
        updated_at = p_now, finished_at = p_finished_at, listing = p_listing,
        journal_rows = jrows,
        control_request = CASE WHEN p_clear_control THEN NULL ELSE control_request END,
        lease_owner = CASE WHEN p_release THEN NULL ELSE lease_owner END,
        lease_expires_at = CASE WHEN p_release THEN NULL ELSE lease_expires_at END,
        lease_nonce = CASE WHEN p_release THEN NULL ELSE lease_nonce END
     WHERE instance_id = p_id;
    new_version := cur.version + 1;
    definition := cur.definition_name;
    RETURN NEXT;
END
$body$
"#;

/// The commit function again, its cost bounded by what the commit writes, not by what the
/// instance (or the store) holds, and the claim that needs no flush of its own:
///
/// * Receipts, bookmarks and timers are inserted with `ON CONFLICT DO NOTHING` and the rows
///   inserted counted: the arbiter index answers each row, where the `EXISTS` checks of
///   migration 3 were planned as a hash of every receipt of the instance and of every
///   bookmark of the store. Only a commit that inserted fewer rows than it carries looks for
///   the first id that was taken or repeated, to raise its error (which undoes the whole
///   commit, the inserted rows included).
/// * The journal cap (ENG-42) counts the instance's journal rows in `journal_rows`
///   (maintained by this function, the only writer of journal rows; counted once when
///   `NULL`, for rows written before this migration) and deletes only the excess, oldest
///   first, found from the front of the primary key, instead of reading the `max` newest
///   rows on every commit.
/// * `lease_nonce` is a random number that a lease claim answered before its own flush
///   writes with its token (ST-35: such a claim lost to a server crash may have its token
///   issued again, but never its nonce); a commit must name it too, `NULL` for a lease taken
///   otherwise, and a refusal is `WFFN0` as for a superseded token.
const MIGRATION_0004: &str = r#"
ALTER TABLE @wf_instances ADD COLUMN lease_nonce BIGINT;

ALTER TABLE @wf_instances ADD COLUMN journal_rows BIGINT;

DROP FUNCTION @wf_commit(
    TEXT, BIGINT, BIGINT, BIGINT, TEXT, TEXT, TEXT, TEXT, BIGINT, BOOLEAN, BOOLEAN,
    TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], TEXT[], BIGINT[], BIGINT[], BIGINT[],
    TEXT[], TEXT[], TEXT[], BIGINT[], BOOLEAN, BOOLEAN, BIGINT, BIGINT, TEXT, BIGINT, TEXT,
    TEXT, BIGINT[], TEXT[], BIGINT[], TEXT[], TEXT[], BIGINT, TEXT[], TEXT[], TEXT[], TEXT[],
    TEXT[], TEXT);

CREATE FUNCTION @wf_commit(
    p_id TEXT, p_expected BIGINT, p_token BIGINT, p_nonce BIGINT, p_now BIGINT, p_state TEXT,
    p_status TEXT, p_sub_status TEXT, p_correlation TEXT, p_finished_at BIGINT,
    p_clear_control BOOLEAN, p_release BOOLEAN,
    p_receipts TEXT[], p_bookmarks_removed TEXT[],
    p_bm_ids TEXT[], p_bm_hashes TEXT[], p_bm_names TEXT[], p_bm_nodes TEXT[],
    p_bm_contexts BIGINT[], p_bm_look_backs BIGINT[], p_bm_created BIGINT[],
    p_timers_removed TEXT[], p_tm_ids TEXT[], p_tm_kinds TEXT[], p_tm_due BIGINT[],
    p_timers_parked BOOLEAN, p_clear_waits BOOLEAN,
    p_compact_through BIGINT, p_compact_at BIGINT, p_compact_kind TEXT,
    p_compact_context BIGINT, p_compact_node TEXT, p_compact_detail TEXT,
    p_jn_at BIGINT[], p_jn_kinds TEXT[], p_jn_contexts BIGINT[], p_jn_nodes TEXT[],
    p_jn_details TEXT[], p_max_journal BIGINT, p_consumed TEXT[],
    p_control_targets TEXT[], p_control_texts TEXT[],
    p_resolved_ids TEXT[], p_resolutions TEXT[],
    p_listing TEXT
) RETURNS TABLE (new_version BIGINT, definition TEXT)
LANGUAGE plpgsql AS $body$
DECLARE
    cur RECORD;
    taken TEXT;
    fresh TEXT[];
    last_seq BIGINT;
    first_seq BIGINT;
    done BIGINT;
    jrows BIGINT;
    excess BIGINT;
BEGIN
    SELECT i.version, i.lease_owner, i.lease_token, i.lease_nonce, i.definition_name,
           i.definition_version, i.correlation_id, i.journal_rows
      INTO cur FROM @wf_instances i WHERE i.instance_id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'WFNF0', MESSAGE = p_id;
    END IF;
    IF cur.version <> p_expected THEN
        RAISE EXCEPTION USING ERRCODE = 'WFCF0', MESSAGE = cur.version::TEXT;
    END IF;
    IF cur.lease_owner IS NULL OR cur.lease_token <> p_token
       OR cur.lease_nonce IS DISTINCT FROM p_nonce THEN
        RAISE EXCEPTION USING ERRCODE = 'WFFN0', MESSAGE = cur.lease_token::TEXT;
    END IF;
    IF cardinality(p_receipts) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_receipts (instance_id, stimulus_id, at)
            SELECT p_id, r.s, p_now FROM unnest(p_receipts) AS r(s)
            ON CONFLICT (instance_id, stimulus_id) DO NOTHING
            RETURNING stimulus_id)
        SELECT array_agg(ins.stimulus_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_receipts) THEN
            SELECT r.s INTO taken FROM unnest(p_receipts) WITH ORDINALITY AS r(s, n)
             WHERE fresh IS NULL OR NOT (r.s = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_receipts) WITH ORDINALITY AS d(s, n)
                           WHERE d.s = r.s AND d.n < r.n)
             ORDER BY r.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFRX0', MESSAGE = taken;
        END IF;
    END IF;
    IF cardinality(p_bookmarks_removed) > 0 THEN
        DELETE FROM @wf_bookmarks
         WHERE instance_id = p_id AND bookmark_id = ANY(p_bookmarks_removed);
    END IF;
    IF cardinality(p_bm_ids) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_bookmarks (bookmark_id, instance_id, hash, name, node_id,
                context_id, correlation_id, definition_name, definition_version, look_back,
                created_at)
            SELECT b.id, p_id, b.hash, b.name, b.node, b.context, p_correlation,
                   cur.definition_name, cur.definition_version, b.look_back, b.created
              FROM unnest(p_bm_ids, p_bm_hashes, p_bm_names, p_bm_nodes, p_bm_contexts,
                          p_bm_look_backs, p_bm_created)
                   AS b(id, hash, name, node, context, look_back, created)
            ON CONFLICT (bookmark_id) DO NOTHING
            RETURNING bookmark_id)
        SELECT array_agg(ins.bookmark_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_bm_ids) THEN
            SELECT b.id INTO taken FROM unnest(p_bm_ids) WITH ORDINALITY AS b(id, n)
             WHERE fresh IS NULL OR NOT (b.id = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_bm_ids) WITH ORDINALITY AS d(id, n)
                           WHERE d.id = b.id AND d.n < b.n)
             ORDER BY b.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFBK0', MESSAGE = taken;
        END IF;
    END IF;
    IF cur.correlation_id IS DISTINCT FROM p_correlation THEN
        UPDATE @wf_bookmarks SET correlation_id = p_correlation
         WHERE instance_id = p_id AND correlation_id IS DISTINCT FROM p_correlation;
    END IF;
    IF cardinality(p_timers_removed) > 0 THEN
        DELETE FROM @wf_timers WHERE instance_id = p_id AND timer_id = ANY(p_timers_removed);
    END IF;
    IF cardinality(p_tm_ids) > 0 THEN
        WITH ins AS (
            INSERT INTO @wf_timers (timer_id, instance_id, kind, due_at, parked)
            SELECT t.id, p_id, t.kind, t.due, FALSE
              FROM unnest(p_tm_ids, p_tm_kinds, p_tm_due) AS t(id, kind, due)
            ON CONFLICT (timer_id) DO NOTHING
            RETURNING timer_id)
        SELECT array_agg(ins.timer_id) INTO fresh FROM ins;
        IF cardinality(fresh) IS DISTINCT FROM cardinality(p_tm_ids) THEN
            SELECT t.id INTO taken FROM unnest(p_tm_ids) WITH ORDINALITY AS t(id, n)
             WHERE fresh IS NULL OR NOT (t.id = ANY(fresh))
                OR EXISTS (SELECT 1 FROM unnest(p_tm_ids) WITH ORDINALITY AS d(id, n)
                           WHERE d.id = t.id AND d.n < t.n)
             ORDER BY t.n LIMIT 1;
            RAISE EXCEPTION USING ERRCODE = 'WFTM0', MESSAGE = taken;
        END IF;
    END IF;
    IF p_timers_parked IS NOT NULL THEN
        UPDATE @wf_timers SET parked = p_timers_parked WHERE instance_id = p_id;
    END IF;
    IF p_clear_waits THEN
        DELETE FROM @wf_bookmarks WHERE instance_id = p_id;
        DELETE FROM @wf_timers WHERE instance_id = p_id;
    END IF;
    jrows := cur.journal_rows;
    IF jrows IS NULL AND (p_compact_through IS NOT NULL OR cardinality(p_jn_at) > 0
                          OR p_max_journal IS NOT NULL) THEN
        SELECT count(*) INTO jrows FROM @wf_journal j WHERE j.instance_id = p_id;
    END IF;
    IF p_compact_through IS NOT NULL THEN
        DELETE FROM @wf_journal WHERE instance_id = p_id AND seq <= p_compact_through;
        GET DIAGNOSTICS done = ROW_COUNT;
        INSERT INTO @wf_journal (instance_id, seq, at, kind, context_id, node_id, detail)
        VALUES (p_id, p_compact_through, p_compact_at, p_compact_kind, p_compact_context,
                p_compact_node, p_compact_detail);
        jrows := jrows - done + 1;
    END IF;
    IF cardinality(p_jn_at) > 0 THEN
        SELECT COALESCE(MAX(j.seq), 0) INTO last_seq FROM @wf_journal j
         WHERE j.instance_id = p_id;
        INSERT INTO @wf_journal (instance_id, seq, at, kind, context_id, node_id, detail)
        SELECT p_id, last_seq + e.n, e.at, e.kind, e.context, e.node, e.detail
          FROM unnest(p_jn_at, p_jn_kinds, p_jn_contexts, p_jn_nodes, p_jn_details)
               WITH ORDINALITY AS e(at, kind, context, node, detail, n);
        jrows := jrows + cardinality(p_jn_at);
    END IF;
    IF p_max_journal IS NOT NULL AND jrows > p_max_journal THEN
        -- The oldest rows first: [first, first + excess) holds at most `excess` rows; the
        -- loop goes on only past a gap in the sequence numbers.
        excess := jrows - p_max_journal;
        LOOP
            SELECT MIN(j.seq) INTO first_seq FROM @wf_journal j WHERE j.instance_id = p_id;
            EXIT WHEN first_seq IS NULL;
            DELETE FROM @wf_journal WHERE instance_id = p_id AND seq < first_seq + excess;
            GET DIAGNOSTICS done = ROW_COUNT;
            jrows := jrows - done;
            excess := excess - done;
            EXIT WHEN excess <= 0;
        END LOOP;
    END IF;
    IF cardinality(p_consumed) > 0 THEN
        DELETE FROM @wf_queue WHERE item_id = ANY(p_consumed);
    END IF;
    IF cardinality(p_resolved_ids) > 0 THEN
        UPDATE @wf_incidents x SET resolved_at = p_now, resolution = r.resolution
          FROM unnest(p_resolved_ids, p_resolutions) AS r(id, resolution)
         WHERE x.incident_id = r.id AND x.instance_id = p_id AND x.resolved_at IS NULL;
    END IF;
    IF cardinality(p_control_targets) > 0 THEN
        UPDATE @wf_instances x SET control_request = c.request
          FROM unnest(p_control_targets, p_control_texts) AS c(target, request)
         WHERE x.instance_id = c.target AND x.status NOT IN ('finished', 'cancelled');
    END IF;
    UPDATE @wf_instances SET
        version = version + 1, state = p_state, state_size = octet_length(p_state),
        status = p_status, sub_status = p_sub_status, correlation_id = p_correlation,
        updated_at = p_now, finished_at = p_finished_at, listing = p_listing,
        journal_rows = jrows,
        control_request = CASE WHEN p_clear_control THEN NULL ELSE control_request END,
        lease_owner = CASE WHEN p_release THEN NULL ELSE lease_owner END,
        lease_expires_at = CASE WHEN p_release THEN NULL ELSE lease_expires_at END,
        lease_nonce = CASE WHEN p_release THEN NULL ELSE lease_nonce END
     WHERE instance_id = p_id;
    new_version := cur.version + 1;
    definition := cur.definition_name;
    RETURN NEXT;
END
$body$
"#;

/// The commit of a run as one server-side function, so a commit is one round trip instead
/// of a statement per row (ST-16): it locks the instance row, checks the expected version and
/// the lease token (ST-13, ST-14), and writes receipts, the bookmark and timer diffs, the
/// journal (with its cap, ENG-42), the consumed queue items, control requests for other
/// instances, resolved incidents and the instance row.
/// Every row set arrives as arrays expanded with `unnest`, every value as a parameter. A
/// refused commit raises an error with one of the `WF` SQL states below, naming what refused
/// it in the message, so nothing of it is written:
///
/// * `WFNF0`: unknown instance; `WFCF0`: stale version (message: the current version);
/// * `WFFN0`: superseded or released token (message: the current token);
/// * `WFRX0`: receipt exists (message: the stimulus id);
/// * `WFBK0` / `WFTM0`: a bookmark / timer id exists (message: the id).
///
/// It returns the new version and the definition name (for the incidents a commit opens).
///
/// The migration also adds the instance row's `listing` column: what a listing shows of an
/// instance (where it is, what it waits for), written by every commit and creation, so a
/// listing reads no state document (`NULL` for rows written before it: a listing then reads
/// their document).
const MIGRATION_0003: &str = r#"
ALTER TABLE @wf_instances ADD COLUMN listing TEXT;

CREATE FUNCTION @wf_commit(
    p_id TEXT, p_expected BIGINT, p_token BIGINT, p_now BIGINT, p_state TEXT,
    p_status TEXT, p_sub_status TEXT, p_correlation TEXT, p_finished_at BIGINT,
    p_clear_control BOOLEAN, p_release BOOLEAN,
    p_receipts TEXT[], p_bookmarks_removed TEXT[],
    p_bm_ids TEXT[], p_bm_hashes TEXT[], p_bm_names TEXT[], p_bm_nodes TEXT[],
    p_bm_contexts BIGINT[], p_bm_look_backs BIGINT[], p_bm_created BIGINT[],
    p_timers_removed TEXT[], p_tm_ids TEXT[], p_tm_kinds TEXT[], p_tm_due BIGINT[],
    p_timers_parked BOOLEAN, p_clear_waits BOOLEAN,
    p_compact_through BIGINT, p_compact_at BIGINT, p_compact_kind TEXT,
    p_compact_context BIGINT, p_compact_node TEXT, p_compact_detail TEXT,
    p_jn_at BIGINT[], p_jn_kinds TEXT[], p_jn_contexts BIGINT[], p_jn_nodes TEXT[],
    p_jn_details TEXT[], p_max_journal BIGINT, p_consumed TEXT[],
    p_control_targets TEXT[], p_control_texts TEXT[],
    p_resolved_ids TEXT[], p_resolutions TEXT[],
    p_listing TEXT
) RETURNS TABLE (new_version BIGINT, definition TEXT)
LANGUAGE plpgsql AS $body$
DECLARE
    cur RECORD;
    taken TEXT;
    last_seq BIGINT;
BEGIN
    SELECT i.version, i.lease_owner, i.lease_token, i.definition_name,
           i.definition_version, i.correlation_id
      INTO cur FROM @wf_instances i WHERE i.instance_id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'WFNF0', MESSAGE = p_id;
    END IF;
    IF cur.version <> p_expected THEN
        RAISE EXCEPTION USING ERRCODE = 'WFCF0', MESSAGE = cur.version::TEXT;
    END IF;
    IF cur.lease_owner IS NULL OR cur.lease_token <> p_token THEN
        RAISE EXCEPTION USING ERRCODE = 'WFFN0', MESSAGE = cur.lease_token::TEXT;
    END IF;
    IF cardinality(p_receipts) > 0 THEN
        SELECT r.s INTO taken FROM unnest(p_receipts) WITH ORDINALITY AS r(s, n)
         WHERE EXISTS (SELECT 1 FROM @wf_receipts x
                       WHERE x.instance_id = p_id AND x.stimulus_id = r.s)
            OR EXISTS (SELECT 1 FROM unnest(p_receipts) WITH ORDINALITY AS d(s, n)
                       WHERE d.s = r.s AND d.n < r.n)
         ORDER BY r.n LIMIT 1;
        IF taken IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'WFRX0', MESSAGE = taken;
        END IF;
        INSERT INTO @wf_receipts (instance_id, stimulus_id, at)
        SELECT p_id, r.s, p_now FROM unnest(p_receipts) AS r(s);
    END IF;
    IF cardinality(p_bookmarks_removed) > 0 THEN
        DELETE FROM @wf_bookmarks
         WHERE instance_id = p_id AND bookmark_id = ANY(p_bookmarks_removed);
    END IF;
    IF cardinality(p_bm_ids) > 0 THEN
        SELECT b.id INTO taken FROM unnest(p_bm_ids) WITH ORDINALITY AS b(id, n)
         WHERE EXISTS (SELECT 1 FROM @wf_bookmarks x WHERE x.bookmark_id = b.id)
            OR EXISTS (SELECT 1 FROM unnest(p_bm_ids) WITH ORDINALITY AS d(id, n)
                       WHERE d.id = b.id AND d.n < b.n)
         ORDER BY b.n LIMIT 1;
        IF taken IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'WFBK0', MESSAGE = taken;
        END IF;
        INSERT INTO @wf_bookmarks (bookmark_id, instance_id, hash, name, node_id, context_id,
            correlation_id, definition_name, definition_version, look_back, created_at)
        SELECT b.id, p_id, b.hash, b.name, b.node, b.context, p_correlation,
               cur.definition_name, cur.definition_version, b.look_back, b.created
          FROM unnest(p_bm_ids, p_bm_hashes, p_bm_names, p_bm_nodes, p_bm_contexts,
                      p_bm_look_backs, p_bm_created)
               AS b(id, hash, name, node, context, look_back, created);
    END IF;
    IF cur.correlation_id IS DISTINCT FROM p_correlation THEN
        UPDATE @wf_bookmarks SET correlation_id = p_correlation
         WHERE instance_id = p_id AND correlation_id IS DISTINCT FROM p_correlation;
    END IF;
    IF cardinality(p_timers_removed) > 0 THEN
        DELETE FROM @wf_timers WHERE instance_id = p_id AND timer_id = ANY(p_timers_removed);
    END IF;
    IF cardinality(p_tm_ids) > 0 THEN
        SELECT t.id INTO taken FROM unnest(p_tm_ids) WITH ORDINALITY AS t(id, n)
         WHERE EXISTS (SELECT 1 FROM @wf_timers x WHERE x.timer_id = t.id)
            OR EXISTS (SELECT 1 FROM unnest(p_tm_ids) WITH ORDINALITY AS d(id, n)
                       WHERE d.id = t.id AND d.n < t.n)
         ORDER BY t.n LIMIT 1;
        IF taken IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'WFTM0', MESSAGE = taken;
        END IF;
        INSERT INTO @wf_timers (timer_id, instance_id, kind, due_at, parked)
        SELECT t.id, p_id, t.kind, t.due, FALSE
          FROM unnest(p_tm_ids, p_tm_kinds, p_tm_due) AS t(id, kind, due);
    END IF;
    IF p_timers_parked IS NOT NULL THEN
        UPDATE @wf_timers SET parked = p_timers_parked WHERE instance_id = p_id;
    END IF;
    IF p_clear_waits THEN
        DELETE FROM @wf_bookmarks WHERE instance_id = p_id;
        DELETE FROM @wf_timers WHERE instance_id = p_id;
    END IF;
    IF p_compact_through IS NOT NULL THEN
        DELETE FROM @wf_journal WHERE instance_id = p_id AND seq <= p_compact_through;
        INSERT INTO @wf_journal (instance_id, seq, at, kind, context_id, node_id, detail)
        VALUES (p_id, p_compact_through, p_compact_at, p_compact_kind, p_compact_context,
                p_compact_node, p_compact_detail);
    END IF;
    IF cardinality(p_jn_at) > 0 THEN
        SELECT COALESCE(MAX(j.seq), 0) INTO last_seq FROM @wf_journal j
         WHERE j.instance_id = p_id;
        INSERT INTO @wf_journal (instance_id, seq, at, kind, context_id, node_id, detail)
        SELECT p_id, last_seq + e.n, e.at, e.kind, e.context, e.node, e.detail
          FROM unnest(p_jn_at, p_jn_kinds, p_jn_contexts, p_jn_nodes, p_jn_details)
               WITH ORDINALITY AS e(at, kind, context, node, detail, n);
    END IF;
    IF p_max_journal IS NOT NULL THEN
        DELETE FROM @wf_journal WHERE instance_id = p_id AND seq <= (
            SELECT j.seq FROM @wf_journal j WHERE j.instance_id = p_id
             ORDER BY j.seq DESC LIMIT 1 OFFSET p_max_journal);
    END IF;
    IF cardinality(p_consumed) > 0 THEN
        DELETE FROM @wf_queue WHERE item_id = ANY(p_consumed);
    END IF;
    IF cardinality(p_resolved_ids) > 0 THEN
        UPDATE @wf_incidents x SET resolved_at = p_now, resolution = r.resolution
          FROM unnest(p_resolved_ids, p_resolutions) AS r(id, resolution)
         WHERE x.incident_id = r.id AND x.instance_id = p_id AND x.resolved_at IS NULL;
    END IF;
    IF cardinality(p_control_targets) > 0 THEN
        UPDATE @wf_instances x SET control_request = c.request
          FROM unnest(p_control_targets, p_control_texts) AS c(target, request)
         WHERE x.instance_id = c.target AND x.status NOT IN ('finished', 'cancelled');
    END IF;
    UPDATE @wf_instances SET
        version = version + 1, state = p_state, state_size = octet_length(p_state),
        status = p_status, sub_status = p_sub_status, correlation_id = p_correlation,
        updated_at = p_now, finished_at = p_finished_at, listing = p_listing,
        control_request = CASE WHEN p_clear_control THEN NULL ELSE control_request END,
        lease_owner = CASE WHEN p_release THEN NULL ELSE lease_owner END,
        lease_expires_at = CASE WHEN p_release THEN NULL ELSE lease_expires_at END
     WHERE instance_id = p_id;
    new_version := cur.version + 1;
    definition := cur.definition_name;
    RETURN NEXT;
END
$body$
"#;

/// Recorded definitions: each registered version's JSON form and fingerprint, so tools (the
/// `workflow` command) can draw and explain an instance without the application's code.
const MIGRATION_0002: &str = r#"
CREATE TABLE @wf_definitions (
    name        TEXT COLLATE "C" NOT NULL,
    version     TEXT COLLATE "C" NOT NULL,
    json        TEXT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (name, version)
);
"#;

/// The whole schema of the first release of this backend. Every text key collates as `"C"`
/// (byte order), so keyset pages order as in the other backends whatever the database's
/// collation. JSON documents are stored as text: a load always decodes (ST-25) and a damaged
/// row fails alone (ST-22). The hot tables (queue, timers, receipts) are narrow and get
/// aggressive autovacuum settings (ST-27).
const MIGRATION_0001: &str = r#"
CREATE TABLE @wf_instances (
    instance_id        TEXT COLLATE "C" PRIMARY KEY,
    definition_name    TEXT COLLATE "C" NOT NULL,
    definition_version TEXT COLLATE "C" NOT NULL,
    status             TEXT NOT NULL,
    sub_status         TEXT,
    correlation_id     TEXT COLLATE "C",
    version            BIGINT NOT NULL,
    lease_owner        TEXT,
    lease_token        BIGINT NOT NULL DEFAULT 0,
    lease_expires_at   BIGINT,
    control_request    TEXT,
    origin_at          BIGINT NOT NULL,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    finished_at        BIGINT,
    state              TEXT NOT NULL,
    state_size         BIGINT NOT NULL,
    activation_scope   TEXT COLLATE "C"
);
CREATE INDEX wf_instances_runnable ON @wf_instances (updated_at, instance_id)
    WHERE status = 'running';
CREATE INDEX wf_instances_definition ON @wf_instances (definition_name, status);
CREATE INDEX wf_instances_correlation ON @wf_instances (correlation_id);
CREATE INDEX wf_instances_finished ON @wf_instances (finished_at);
CREATE INDEX wf_instances_activation ON @wf_instances (activation_scope)
    WHERE activation_scope IS NOT NULL AND status NOT IN ('finished', 'cancelled');

CREATE TABLE @wf_bookmarks (
    bookmark_id        TEXT COLLATE "C" PRIMARY KEY,
    instance_id        TEXT COLLATE "C" NOT NULL,
    hash               TEXT COLLATE "C" NOT NULL,
    name               TEXT NOT NULL,
    node_id            TEXT NOT NULL,
    context_id         BIGINT NOT NULL,
    correlation_id     TEXT COLLATE "C",
    definition_name    TEXT COLLATE "C" NOT NULL,
    definition_version TEXT COLLATE "C" NOT NULL,
    look_back          BIGINT,
    created_at         BIGINT NOT NULL
);
CREATE INDEX wf_bookmarks_hash ON @wf_bookmarks (hash, created_at, bookmark_id);
CREATE INDEX wf_bookmarks_instance ON @wf_bookmarks (instance_id);

CREATE TABLE @wf_triggers (
    definition_name    TEXT COLLATE "C" NOT NULL,
    node_id            TEXT COLLATE "C" NOT NULL,
    hash               TEXT COLLATE "C" NOT NULL,
    definition_version TEXT NOT NULL,
    name               TEXT NOT NULL,
    key_display        TEXT,
    payload            TEXT NOT NULL,
    activation         TEXT NOT NULL,
    registered_at      BIGINT NOT NULL,
    PRIMARY KEY (definition_name, node_id, hash)
);
CREATE INDEX wf_triggers_hash ON @wf_triggers (hash);

CREATE TABLE @wf_queue (
    item_id          TEXT COLLATE "C" PRIMARY KEY,
    stimulus_id      TEXT NOT NULL,
    name             TEXT NOT NULL,
    hash             TEXT COLLATE "C" NOT NULL,
    key_display      TEXT,
    payload          TEXT NOT NULL,
    correlation_id   TEXT,
    targets          TEXT NOT NULL,
    sent_at          BIGINT NOT NULL,
    enqueued_at      BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    attempts         BIGINT NOT NULL DEFAULT 0,
    last_error       TEXT,
    last_attempt_at  BIGINT,
    held             BOOLEAN NOT NULL DEFAULT FALSE,
    idempotency_key  TEXT,
    claim_owner      TEXT,
    claim_expires_at BIGINT
);
CREATE INDEX wf_queue_order ON @wf_queue (sent_at, item_id);
CREATE INDEX wf_queue_expiry ON @wf_queue (expires_at) WHERE NOT held;
ALTER TABLE @wf_queue SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 200, autovacuum_analyze_scale_factor = 0.05);

CREATE TABLE @wf_dead_letters (
    original_item_id TEXT COLLATE "C" PRIMARY KEY,
    stimulus_id      TEXT NOT NULL,
    name             TEXT NOT NULL,
    hash             TEXT COLLATE "C" NOT NULL,
    key_display      TEXT,
    payload          TEXT NOT NULL,
    correlation_id   TEXT,
    targets          TEXT NOT NULL,
    sent_at          BIGINT NOT NULL,
    enqueued_at      BIGINT NOT NULL,
    expires_at       BIGINT NOT NULL,
    attempts         BIGINT NOT NULL,
    last_error       TEXT,
    last_attempt_at  BIGINT,
    held             BOOLEAN NOT NULL,
    idempotency_key  TEXT,
    reason           TEXT NOT NULL,
    error            TEXT,
    dead_at          BIGINT NOT NULL
);
CREATE INDEX wf_dead_letters_dead_at ON @wf_dead_letters (dead_at, original_item_id);

CREATE TABLE @wf_timers (
    timer_id         TEXT COLLATE "C" PRIMARY KEY,
    instance_id      TEXT COLLATE "C",
    kind             TEXT NOT NULL,
    due_at           BIGINT NOT NULL,
    claim_owner      TEXT,
    claim_expires_at BIGINT,
    parked           BOOLEAN NOT NULL DEFAULT FALSE,
    definition_name  TEXT COLLATE "C",
    node_id          TEXT
);
CREATE INDEX wf_timers_due ON @wf_timers (due_at, timer_id) WHERE NOT parked;
CREATE INDEX wf_timers_instance ON @wf_timers (instance_id);
CREATE INDEX wf_timers_definition ON @wf_timers (definition_name);
ALTER TABLE @wf_timers SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 200, autovacuum_analyze_scale_factor = 0.05);

CREATE TABLE @wf_journal (
    instance_id TEXT COLLATE "C" NOT NULL,
    seq         BIGINT NOT NULL,
    at          BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    context_id  BIGINT,
    node_id     TEXT,
    detail      TEXT NOT NULL,
    PRIMARY KEY (instance_id, seq)
);

CREATE TABLE @wf_receipts (
    instance_id TEXT COLLATE "C" NOT NULL,
    stimulus_id TEXT COLLATE "C" NOT NULL,
    at          BIGINT NOT NULL,
    PRIMARY KEY (instance_id, stimulus_id)
);
CREATE INDEX wf_receipts_at ON @wf_receipts (at);
ALTER TABLE @wf_receipts SET (autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 200, autovacuum_analyze_scale_factor = 0.05);

CREATE TABLE @wf_named_leases (
    name       TEXT COLLATE "C" PRIMARY KEY,
    owner      TEXT,
    token      BIGINT NOT NULL,
    expires_at BIGINT
);

CREATE TABLE @wf_idempotency (
    idempotency_key TEXT COLLATE "C" PRIMARY KEY,
    hash            TEXT NOT NULL,
    payload_digest  TEXT NOT NULL,
    report          TEXT NOT NULL,
    created_at      BIGINT NOT NULL
);
CREATE INDEX wf_idempotency_created ON @wf_idempotency (created_at);

CREATE TABLE @wf_incidents (
    incident_id     TEXT COLLATE "C" PRIMARY KEY,
    instance_id     TEXT COLLATE "C" NOT NULL,
    definition_name TEXT NOT NULL,
    kind            TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    resolved_at     BIGINT,
    resolution      TEXT,
    record          TEXT NOT NULL
);
CREATE INDEX wf_incidents_instance ON @wf_incidents (instance_id, created_at);
CREATE INDEX wf_incidents_created ON @wf_incidents (created_at, incident_id);
"#;

/// The newest schema version this library knows.
pub(super) fn latest_schema_version() -> u32 {
    MIGRATIONS.iter().map(|(v, _, _)| *v).max().unwrap_or(0)
}

/// SHA-256 of a migration's text, in hex: detects an edited migration (ST-28).
fn checksum(sql: &str) -> String {
    let digest = Sha256::digest(sql.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks and applies the pending migrations, each in its own transaction under the
/// schema's advisory lock (ST-27, ST-28). Returns the versions applied by this call.
///
/// Boxed as a `Send` future here, where its lifetimes are concrete: callers can then spawn
/// the store's constructors on a multi-threaded runtime.
pub(super) fn migrate<'a>(
    pool: &'a PgPool,
    schema: &'a Schema,
    mode: MigrateMode,
) -> BoxFuture<'a, StoreResult<Vec<u32>>> {
    Box::pin(migrate_inner(pool, schema, mode, latest_schema_version()))
}

/// [`migrate`] up to `target` only (test fixtures of older schemas, ST-29).
#[cfg(feature = "test-support")]
pub(super) fn migrate_to<'a>(
    pool: &'a PgPool,
    schema: &'a Schema,
    target: u32,
) -> BoxFuture<'a, StoreResult<Vec<u32>>> {
    Box::pin(migrate_inner(pool, schema, MigrateMode::Apply, target))
}

async fn migrate_inner(
    pool: &PgPool,
    schema: &Schema,
    mode: MigrateMode,
    target: u32,
) -> StoreResult<Vec<u32>> {
    let mut done = Vec::new();
    loop {
        let mut tx = pool.begin().await?;
        let step = {
            let c: &mut PgConnection = &mut tx;
            migrate_one(c, schema, mode, target).await
        };
        match step {
            Ok(Some(version)) => {
                tx.commit().await?;
                done.push(version);
            }
            Ok(None) => {
                tx.commit().await?;
                return Ok(done);
            }
            Err(error) => {
                let _ = tx.rollback().await;
                return Err(error);
            }
        }
    }
}

/// Runs a migration script statement by statement: the texts have no `;` but between
/// statements, except inside a `$body$`-quoted function body, which stays whole.
async fn execute_script(c: &mut PgConnection, script: &str) -> StoreResult<()> {
    for statement in split_script(script) {
        sqlx::query(statement).execute(&mut *c).await?;
    }
    Ok(())
}

/// The statements of a migration script: split at each `;` outside `$body$` quotes.
fn split_script(script: &str) -> Vec<&str> {
    const QUOTE: &str = "$body$";
    let mut statements = Vec::new();
    let (mut start, mut at, mut quoted) = (0, 0, false);
    while at < script.len() {
        let rest = &script[at..];
        if rest.starts_with(QUOTE) {
            quoted = !quoted;
            at += QUOTE.len();
        } else if !quoted && rest.starts_with(';') {
            statements.push(script[start..at].trim());
            at += 1;
            start = at;
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
        }
    }
    statements.push(script[start..].trim());
    statements.retain(|s| !s.is_empty());
    statements
}

/// One step of [`migrate`], inside its transaction: takes the lock, checks what is applied,
/// applies the next pending migration up to `target`; `None` when there is none.
async fn migrate_one(
    c: &mut PgConnection,
    schema: &Schema,
    mode: MigrateMode,
    target: u32,
) -> StoreResult<Option<u32>> {
    let latest = latest_schema_version();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(format!("workflow-migrations:{}", schema.name()))
        .execute(&mut *c)
        .await?;
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables
         WHERE schemaname = $1 AND tablename = 'wf_schema_migrations')",
    )
    .bind(schema.name().to_owned())
    .fetch_one(&mut *c)
    .await?;
    let mut applied: Vec<(i64, String)> = Vec::new();
    if exists {
        let rows = sqlx::query(
            &schema.sql("SELECT version, checksum FROM @wf_schema_migrations ORDER BY version"),
        )
        .fetch_all(&mut *c)
        .await?;
        for row in &rows {
            applied.push((row.try_get(0)?, row.try_get(1)?));
        }
    }
    let found =
        crate::store::migrations::check_recorded_migrations(&applied, MIGRATIONS, checksum)?;
    let Some((version, name, sql)) = MIGRATIONS
        .iter()
        .find(|(v, _, _)| *v <= target && !applied.iter().any(|(a, _)| *a == i64::from(*v)))
    else {
        return Ok(None);
    };
    if mode == MigrateMode::CheckOnly {
        return Err(StoreError::SchemaOutdated {
            found,
            required: latest,
        });
    }
    if !exists {
        let create = schema.sql(&format!(
            "CREATE SCHEMA IF NOT EXISTS \"{}\";
             CREATE TABLE @wf_schema_migrations (
                version    BIGINT PRIMARY KEY,
                name       TEXT NOT NULL,
                checksum   TEXT NOT NULL,
                applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
             );",
            schema.name()
        ));
        execute_script(c, &create).await?;
    }
    execute_script(c, &schema.sql(sql)).await?;
    sqlx::query(
        &schema
            .sql("INSERT INTO @wf_schema_migrations (version, name, checksum) VALUES ($1, $2, $3)"),
    )
    .bind(i64::from(*version))
    .bind(*name)
    .bind(checksum(sql))
    .execute(&mut *c)
    .await?;
    tracing::info!(
        schema = schema.name(),
        version,
        name,
        "postgres store: migration applied"
    );
    Ok(Some(*version))
}
