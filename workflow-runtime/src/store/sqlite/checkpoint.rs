//! The WAL's checkpoints, off the writer's commits (ST-26).
//!
//! SQLite checkpoints a WAL-mode file by itself inside the commit that takes the WAL past a
//! thousand frames, on the committing connection: the writer would copy the pages to the
//! database file and sync both files before it could take its next request, and every caller
//! waiting for that commit would wait for them too. The writer's connection has that automatic
//! checkpoint off. Instead a connection of its own, on a thread of its own, runs a `PASSIVE`
//! checkpoint each time the writer's commits have added [`STEP`] frames to the WAL since it was
//! last asked: a passive checkpoint takes no lock a writer or reader waits for, so the writer
//! commits on meanwhile.
//!
//! A checkpoint only copies frames. The WAL is rewound (written again from its start) by the
//! first write transaction that begins after a checkpoint copied every frame in it, and a
//! writer that stays busy appends new frames while the checkpointer copies the old ones, so
//! under a steady load the WAL would grow without end. It is bounded: once it holds
//! [`LIMIT`] frames the writer runs the passive checkpoint itself between two transactions,
//! as SQLite would have, which then copies every frame (none is added meanwhile, and the
//! checkpointer has copied most of them already), and its next transaction rewinds the WAL.
//! A reader's open snapshot holds a checkpoint back exactly as it did before: the writer then
//! tries again after each commit until the reader has moved on.
//!
//! Durability does not depend on any of this: a commit is in the WAL (synced under `FULL`)
//! before it is answered, and SQLite's checkpoints are safe to interrupt at any point.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::mpsc;

use rusqlite::Connection;
use rusqlite::hooks::Wal;

/// Frames the writer's commits add to the WAL between two requests to the checkpointer: the
/// interval of SQLite's own automatic checkpoint.
pub(super) const STEP: u32 = 1_000;

/// Frames in the WAL from which the writer checkpoints itself (16 MiB of 4 KiB pages).
pub(super) const LIMIT: u32 = 4 * STEP;

thread_local! {
    /// The frames in the WAL after the last commit of the connection on this thread (the
    /// writer's: its thread runs nothing else), set by [`note_frames`].
    static WAL_FRAMES: Cell<u32> = const { Cell::new(0) };
}

/// SQLite's WAL hook: called after each commit with the frames now in the WAL.
fn note_frames(_: &Wal, frames: c_int) -> rusqlite::Result<()> {
    WAL_FRAMES.with(|f| f.set(u32::try_from(frames).unwrap_or(0)));
    Ok(())
}

/// The writer's side: when to ask the checkpointer, when to checkpoint itself.
pub(super) struct Checkpoints {
    wake: mpsc::SyncSender<()>,
    /// The WAL's frames when the checkpointer was last asked.
    asked_at: u32,
}

impl Checkpoints {
    /// Turns the writer connection's automatic checkpoint off and has SQLite report the
    /// WAL's size after each of its commits (to the thread that commits: the writer's).
    pub(super) fn install(conn: &Connection, wake: mpsc::SyncSender<()>) -> rusqlite::Result<Self> {
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        // After the pragma, which installs a hook of its own.
        conn.wal_hook(Some(note_frames));
        Ok(Self { wake, asked_at: 0 })
    }

    /// Runs after each transaction of the writer, on its thread: asks the checkpointer when
    /// it is time, and says whether the writer is to checkpoint itself now ([`LIMIT`]).
    pub(super) fn after_commit(&mut self) -> bool {
        let frames = WAL_FRAMES.with(Cell::get);
        if frames < self.asked_at {
            // The WAL was rewound.
            self.asked_at = 0;
        }
        if frames >= LIMIT {
            self.asked_at = frames;
            return true;
        }
        if frames >= self.asked_at.saturating_add(STEP) {
            self.asked_at = frames;
            // Full: the checkpointer has a request pending already, which covers this one.
            let _ = self.wake.try_send(());
        }
        false
    }

    /// The writer's own checkpoint, between two of its transactions.
    pub(super) fn checkpoint(conn: &Connection) {
        // Fails only while the checkpointer runs one (busy, reported in the row) or on an
        // I/O error; the frames stay where every reader finds them, and the next commit
        // tries again.
        if let Err(error) = passive(conn) {
            tracing::debug!(%error, "sqlite: the writer's checkpoint failed");
        }
    }
}

/// Runs a passive checkpoint: copies to the database file every frame no reader still needs,
/// without waiting for any lock.
fn passive(conn: &Connection) -> rusqlite::Result<()> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
}

/// The checkpointer thread: one passive checkpoint per request, until the writer is gone.
pub(super) fn checkpointer_loop(conn: &Connection, wake: &mpsc::Receiver<()>) {
    while wake.recv().is_ok() {
        if let Err(error) = passive(conn) {
            tracing::debug!(%error, "sqlite: a checkpoint failed");
        }
    }
}
