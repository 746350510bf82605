//! Debounced sends (RT-35): a burst of sends with the same name and key collapses into one
//! delivery once the window is quiet, with the last payload; across a restart in the middle
//! of a window, still one; a window of zero or longer than a day is refused before anything
//! is stored; the background driver delivers on the real clock.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use workflow_runtime::store::{InstanceFilter, SqliteStore};
use workflow_runtime::testing::TestRuntime;
use workflow_runtime::{
    ManualClock, Runtime, RuntimeBuilder, SendError, Stimulus, TaskContext, workflow,
};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
/// The data of [`Reindex`]: the edit its event carried, and whether it was indexed.
pub struct Edit {
    document: String,
    revision: u32,
    indexed: bool,
}

async fn index(ctx: &mut TaskContext<Edit>) {
    ctx.data_mut().indexed = true;
}

workflow! {
    /// Started by each delivered `document.edited`: one instance per delivery.
    pub workflow Reindex(Edit) {
        edited = event::<Edit>("document.edited").trigger();
        reindex = task(index);

        edited -> reindex;
    }
}

const WINDOW: Duration = Duration::from_millis(200);

fn edit(revision: u32) -> Stimulus {
    Stimulus::new("document.edited")
        .key("doc-7")
        .payload(Edit {
            document: "doc-7".to_owned(),
            revision,
            indexed: false,
        })
        .debounce(WINDOW)
}

/// The data of every instance, by revision: one per delivery.
async fn deliveries(runtime: &Runtime) -> Vec<Edit> {
    let listed = runtime
        .store()
        .list_instances(InstanceFilter::default())
        .await
        .unwrap();
    let mut out = Vec::new();
    for instance in listed {
        let snapshot = runtime
            .get_state(&instance.instance_id)
            .await
            .unwrap()
            .unwrap();
        out.push(snapshot.data::<Edit>().unwrap());
    }
    out.sort_by_key(|e| (e.document.clone(), e.revision));
    out
}

fn indexed(revision: u32) -> Edit {
    Edit {
        document: "doc-7".to_owned(),
        revision,
        indexed: true,
    }
}

#[tokio::test]
async fn a_hundred_sends_in_a_second_deliver_once_with_the_last_payload() {
    let test = TestRuntime::build(Runtime::builder().register::<Reindex>()).unwrap();
    for revision in 1..=100 {
        let report = test.send(edit(revision)).await.unwrap();
        let debounced = report.debounced.expect("a debounced send says so");
        assert_eq!(debounced.sends, u64::from(revision), "each send is counted");
        assert!(report.started.is_empty() && report.inbox_item.is_none());
        // 100 sends over one second: each 10 ms after the last, inside the window.
        let fired = test.advance(Duration::from_millis(10)).await.unwrap();
        assert!(fired.debounced.is_empty(), "delivered during the burst");
    }
    assert!(deliveries(&test).await.is_empty());
    // The last send was 10 ms ago: 189 ms more and the window is still not quiet.
    let fired = test.advance(Duration::from_millis(189)).await.unwrap();
    assert!(fired.debounced.is_empty());
    let fired = test.advance(Duration::from_millis(1)).await.unwrap();
    assert_eq!(fired.debounced.len(), 1, "{fired:?}");
    assert_eq!(deliveries(&test).await, vec![indexed(100)]);
    // Nothing left to deliver later.
    let fired = test.advance(Duration::from_secs(60)).await.unwrap();
    assert!(fired.debounced.is_empty());
    assert_eq!(deliveries(&test).await.len(), 1);
}

#[tokio::test]
async fn sends_with_other_keys_are_debounced_apart() {
    let test = TestRuntime::build(Runtime::builder().register::<Reindex>()).unwrap();
    test.send(edit(1)).await.unwrap();
    let other = Stimulus::new("document.edited")
        .key("doc-8")
        .payload(Edit {
            document: "doc-8".to_owned(),
            revision: 5,
            indexed: false,
        })
        .debounce(WINDOW);
    test.send(other).await.unwrap();
    test.send(edit(2)).await.unwrap();
    let fired = test.advance(WINDOW).await.unwrap();
    assert_eq!(fired.debounced.len(), 2);
    let mut revisions: Vec<(String, u32)> = deliveries(&test)
        .await
        .into_iter()
        .map(|e| (e.document, e.revision))
        .collect();
    revisions.sort();
    assert_eq!(
        revisions,
        [("doc-7".to_owned(), 2), ("doc-8".to_owned(), 5)]
    );
}

fn on_file(path: &std::path::Path, at: i64) -> TestRuntime {
    let store = Arc::new(SqliteStore::open(path).unwrap());
    let builder: RuntimeBuilder = Runtime::builder().register::<Reindex>().store(store);
    TestRuntime::build_at(builder, ManualClock::new(at)).unwrap()
}

/// Runs one process's part on a tokio runtime of its own: when it returns, nothing of that
/// process holds the file.
fn process<T>(part: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a tokio runtime")
        .block_on(part)
}

#[test]
fn a_restart_in_the_middle_of_a_window_still_delivers_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("debounce.db");
    let at = process(async {
        let first = on_file(&path, ManualClock::DEFAULT_START);
        for revision in 1..=50 {
            first.send(edit(revision)).await.unwrap();
            first.advance(Duration::from_millis(10)).await.unwrap();
        }
        first.shutdown(Duration::from_secs(1)).await;
        first.now()
    });
    // The process is gone in the middle of the window; the next one carries the burst on.
    let at = process(async {
        let second = on_file(&path, at);
        for revision in 51..=100 {
            let report = second.send(edit(revision)).await.unwrap();
            assert_eq!(report.debounced.unwrap().sends, u64::from(revision));
            second.advance(Duration::from_millis(10)).await.unwrap();
        }
        assert!(deliveries(&second).await.is_empty());
        let fired = second.advance(WINDOW).await.unwrap();
        assert_eq!(fired.debounced.len(), 1);
        assert_eq!(deliveries(&second).await, vec![indexed(100)]);
        // One more send, and the process stops before its window ends.
        second.send(edit(101)).await.unwrap();
        second.shutdown(Duration::from_secs(1)).await;
        second.now()
    });
    // The next process delivers it once it is due, and nothing twice.
    process(async {
        let third = on_file(&path, at + 50_000);
        let fired = third.advance(WINDOW).await.unwrap();
        assert_eq!(fired.debounced.len(), 1);
        assert_eq!(deliveries(&third).await, vec![indexed(100), indexed(101)]);
        let fired = third.advance(Duration::from_secs(60)).await.unwrap();
        assert!(fired.debounced.is_empty());
        third.shutdown(Duration::from_secs(1)).await;
    });
}

#[tokio::test]
async fn a_zero_or_absurd_window_is_refused_and_nothing_is_stored() {
    let test = TestRuntime::build(Runtime::builder().register::<Reindex>()).unwrap();
    for (window, problem) in [
        (Duration::ZERO, "zero"),
        (Duration::from_micros(10), "too short"),
        (Duration::from_secs(2 * 24 * 3600), "too long"),
        (Duration::MAX, "too long"),
    ] {
        let error = test
            .send(edit(1).debounce(window))
            .await
            .expect_err("refused");
        match &error {
            SendError::InvalidDebounce {
                window: given,
                problem: said,
                ..
            } => {
                assert_eq!((*given, *said), (window, problem));
            }
            other => panic!("{other:?}"),
        }
        assert!(error.to_string().contains("debounce window"), "{error}");
    }
    assert_eq!(
        test.store().earliest_debounce(i64::MAX).await.unwrap(),
        None
    );
    let fired = test
        .advance(Duration::from_secs(3 * 24 * 3600))
        .await
        .unwrap();
    assert!(fired.debounced.is_empty());
    assert!(deliveries(&test).await.is_empty());
}

#[tokio::test]
async fn the_background_driver_delivers_once_the_window_is_quiet() {
    let runtime = Runtime::builder().register::<Reindex>().build().unwrap();
    for revision in 1..=20 {
        runtime
            .send(edit(revision).debounce(Duration::from_millis(50)))
            .await
            .unwrap();
    }
    let mut delivered = Vec::new();
    for _ in 0..500 {
        delivered = deliveries(&runtime).await;
        if delivered.iter().any(|e| e.indexed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(delivered, vec![indexed(20)]);
    // Generous: nothing else comes.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(deliveries(&runtime).await.len(), 1);
}
