//! The instants and rows the cases build on.

use serde_json::{Value, json};

use crate::store::{
    Commit, InstanceStatus, InstanceSubStatus, Lease, LeaseKey, Micros, NewBookmark, NewInstance,
    NewJournalRecord, NewTimer, QueueItem, Storage, TriggerRow, WakeUp,
};

/// A fixed epoch for the suite's instants: 2023-11-14T22:13:20Z in µs.
pub const T0: Micros = 1_700_000_000_000_000;
/// One second in µs.
pub const SEC: Micros = 1_000_000;
/// The lease TTL the suite uses: 30 s.
pub const TTL: Micros = 30 * SEC;

/// Journal entry `n`: kind `k{n}`, at `T0 + n`, no context or node, detail `n`.
pub fn journal_entry(n: u64) -> NewJournalRecord {
    NewJournalRecord {
        at: T0 + n as Micros,
        kind: format!("k{n}"),
        context_id: None,
        node_id: None,
        detail: json!(n),
    }
}

/// A minimal state document of format 1.
pub fn doc(n: i64) -> Value {
    json!({ "format": 1, "n": n })
}

/// A `Running/Pending` instance of definition `order` created at `T0`.
pub fn new_instance(id: &str) -> NewInstance {
    NewInstance {
        instance_id: id.to_owned(),
        definition_name: "order".to_owned(),
        definition_version: "v1".to_owned(),
        status: InstanceStatus::Running,
        sub_status: Some(InstanceSubStatus::Pending),
        correlation_id: None,
        origin_at: T0,
        created_at: T0,
        state: doc(0),
        receipt: None,
        consumed_queue_item: None,
        activation_scope: None,
        listing: None,
        idempotency: None,
    }
}

/// A bookmark with `hash` created at `created_at`.
pub fn bookmark(id: &str, hash: &str, created_at: Micros) -> NewBookmark {
    NewBookmark {
        bookmark_id: id.to_owned(),
        hash: hash.to_owned(),
        name: "approved".to_owned(),
        node_id: "root:wait".to_owned(),
        context_id: 2,
        look_back: None,
        created_at,
    }
}

/// A queue item sent at `sent_at`, expiring 10 minutes later.
pub fn queue_item(id: &str, sent_at: Micros) -> QueueItem {
    QueueItem {
        item_id: id.to_owned(),
        stimulus_id: format!("s-{id}"),
        name: "approved".to_owned(),
        hash: "h".to_owned(),
        key_display: Some("order=1".to_owned()),
        payload: json!({ "ok": true, "n": u64::MAX }),
        correlation_id: None,
        targets: json!({ "instance_id": null }),
        sent_at,
        enqueued_at: sent_at,
        expires_at: sent_at + 600 * SEC,
        attempts: 0,
        last_error: None,
        last_attempt_at: None,
        held: false,
        idempotency_key: None,
    }
}

/// Creates `id` and acquires its lease for `owner` at `T0`.
pub async fn create_leased(store: &Storage, id: &str) -> Lease {
    store.create_instance(new_instance(id)).await.unwrap();
    store
        .acquire_lease(&LeaseKey::instance(id), "node-a", T0, TTL)
        .await
        .unwrap()
}

/// A `Suspended/Waiting` commit of `doc(n)`.
pub fn waiting(id: &str, version: u64, token: u64, n: i64) -> Commit {
    Commit::new(
        id,
        version,
        token,
        T0 + SEC,
        doc(n),
        InstanceStatus::Suspended,
        Some(InstanceSubStatus::Waiting),
    )
}

pub(super) fn final_commit(id: &str, version: u64, token: u64, at: Micros) -> Commit {
    let mut c = Commit::new(
        id,
        version,
        token,
        at,
        doc(99),
        InstanceStatus::Finished,
        None,
    );
    c.release_lease = true;
    c
}

pub(super) fn trigger(node: &str, hash: &str, payload: Value) -> TriggerRow {
    TriggerRow {
        definition_name: "order".to_owned(),
        definition_version: "v1".to_owned(),
        node_id: node.to_owned(),
        hash: hash.to_owned(),
        name: "order_placed".to_owned(),
        key_display: None,
        payload,
        activation: json!({ "kind": "always" }),
        registered_at: T0,
    }
}

pub(super) fn timer(id: &str, due_at: Micros) -> NewTimer {
    NewTimer {
        timer_id: id.to_owned(),
        kind: "delay".to_owned(),
        due_at,
    }
}

pub(super) fn drain(rx: &mut tokio::sync::broadcast::Receiver<WakeUp>) -> Vec<WakeUp> {
    let mut hints = Vec::new();
    while let Ok(hint) = rx.try_recv() {
        hints.push(hint);
    }
    hints
}

/// A journal entry as a row of its own: `(seq, kind, context id, node id, detail text)`.
pub type OldJournalRow = (
    i64,
    &'static str,
    Option<i64>,
    Option<&'static str>,
    &'static str,
);

/// The journal of `wf-1` as an older schema's upgrade test writes it, a row per entry, each
/// at `T0 + seq`. A summary at 2 below entries 5
/// to 7 (the cap removed 3 and 4), the detail of 6 damaged.
pub const JOURNAL_BEFORE_UPGRADE: [OldJournalRow; 4] = [
    (2, "compacted", None, None, "{\"entries\":2}"),
    (5, "k5", Some(5), Some("root"), "5"),
    (6, "k6", None, Some("root:a"), "{not json"),
    (7, "k7", Some(7), None, "\"seven\""),
];

/// ST-10: the journal written as [`JOURNAL_BEFORE_UPGRADE`] reads the same after an upgrade
/// (its seqs, instants, kinds, ids and values, a page from the middle, the damaged detail
/// marking its entry alone), and `wf-1`, created then, goes on: a commit's entries are
/// numbered after 7 and the cap of 4 (ENG-42) takes the summary and 5.
pub async fn assert_journal_reads_as_before_the_upgrade(store: &Storage) {
    let all = store.read_journal("wf-1", 0, 100).await.unwrap();
    // seq, at, kind, context, node.
    type Seen<'a> = (u64, Micros, &'a str, Option<u64>, Option<&'a str>);
    let got: Vec<Seen<'_>> = all
        .iter()
        .map(|e| {
            (
                e.seq,
                e.at,
                e.kind.as_str(),
                e.context_id,
                e.node_id.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (2, T0 + 2, "compacted", None, None),
            (5, T0 + 5, "k5", Some(5), Some("root")),
            (6, T0 + 6, "k6", None, Some("root:a")),
            (7, T0 + 7, "k7", Some(7), None),
        ]
    );
    assert_eq!(all[0].detail, json!({ "entries": 2 }));
    assert_eq!(all[1].detail, json!(5));
    assert!(all[2].detail.get("undecodable").is_some(), "{:?}", all[2]);
    assert_eq!(all[3].detail, json!("seven"));
    let page: Vec<u64> = store
        .read_journal("wf-1", 3, 2)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(page, [5, 6]);
    let lease = create_leased(store, "wf-1").await;
    let mut c = waiting("wf-1", 1, lease.token, 1);
    c.journal = (8..=9).map(journal_entry).collect();
    c.max_journal_entries = Some(4);
    store.commit(c).await.unwrap();
    let kept: Vec<(u64, String)> = store
        .read_journal("wf-1", 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.seq, e.kind))
        .collect();
    assert_eq!(
        kept,
        [
            (6, "k6".to_owned()),
            (7, "k7".to_owned()),
            (8, "k8".to_owned()),
            (9, "k9".to_owned())
        ]
    );
}
