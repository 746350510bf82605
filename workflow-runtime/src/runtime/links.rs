//! Links between instances (ACT-24): carries out the work that commits queued in the run
//! path's outbox: starts children, resumes parents with their children's results, cancels
//! children of cancelled SubWorkflows. Iterative, so a chain of nested sub-workflows does not
//! recurse. (In process, after the commit: a crash in between is covered by the store, where
//! a child never run is recovered and a child's result is queued.)

use std::sync::Arc;

use super::document::load_state;
use super::errors::StartError;
use super::outcomes::StartOptions;
use super::run_path::{Delivery, RunOptions, RunPath};
use super::starts::Starts;
use crate::engine::executor::{Link, RunError, RunTarget};
use crate::engine::state::{SubStatus, WorkflowStatus};
use crate::status::Started;

/// Carries out the links commits queued.
pub(crate) struct Links {
    run_path: Arc<RunPath>,
    starts: Arc<Starts>,
}

impl Links {
    pub(crate) fn new(run_path: Arc<RunPath>, starts: Arc<Starts>) -> Self {
        Self { run_path, starts }
    }

    /// The status after linked work moved the instance on (a child that finished at once
    /// resumed its parent, ACT-24).
    pub(crate) async fn refresh(&self, started: &mut Started) {
        if let Ok(Some(state)) = load_state(self.run_path.store(), &started.instance_id).await {
            started.status = state.status;
            started.sub_status = state.sub_status;
        }
    }

    /// Carries out the links queued so far, and those they queue in turn. Returns whether it
    /// did anything.
    pub(crate) async fn process(&self) -> bool {
        let outbox = self.run_path.outbox();
        let mut any = false;
        loop {
            let Some(link) = outbox.pop() else {
                return any;
            };
            any = true;
            match link {
                Link::Start {
                    workflow,
                    instance_id,
                    input,
                    parent,
                } => {
                    let options = StartOptions {
                        instance_id: Some(instance_id.clone()),
                        ..StartOptions::default()
                    };
                    let bookmark = parent.bookmark_id.clone();
                    let parent_id = parent.instance_id.clone();
                    let started = if outbox.take_created(&instance_id) {
                        // Created atomically with its parent's commit: run it.
                        match self.run_path.run(&instance_id, RunOptions::first()).await {
                            Ok(Some(started)) => Ok(started),
                            Ok(None) => Ok(Started {
                                instance_id: instance_id.clone(),
                                status: WorkflowStatus::Running,
                                sub_status: Some(SubStatus::Pending),
                            }),
                            Err(error) => {
                                self.starts.discard(&instance_id).await;
                                Err(StartError::Run(error))
                            }
                        }
                    } else {
                        self.starts
                            .start(&workflow, input, options, Some(parent))
                            .await
                    };
                    match (started, bookmark) {
                        // The parent learns that its child could not run (ACT-24).
                        (Err(error), Some(bookmark_id)) => {
                            outbox.push(Link::Resume {
                                instance_id: parent_id,
                                bookmark_id,
                                payload: serde_json::json!({
                                    "child_instance_id": instance_id,
                                    "status": "Failed",
                                    "error": error.to_string(),
                                }),
                            });
                        }
                        // A detached child has no parent waiting for it: the operator is told.
                        (Err(error), None) => tracing::warn!(
                            instance = parent_id.as_str(),
                            child = instance_id.as_str(),
                            definition = workflow.as_str(),
                            %error,
                            "a detached child could not start"
                        ),
                        (Ok(_), _) => {}
                    }
                }
                Link::Cancel { instance_id } => {
                    // Already final or gone: nothing to cancel.
                    let _ = self
                        .run_path
                        .cancel(&instance_id, Some("parent cancelled".to_owned()))
                        .await;
                }
                Link::Resume {
                    instance_id,
                    bookmark_id,
                    payload,
                } => {
                    let target = RunTarget::Bookmarks {
                        ids: vec![bookmark_id.clone()],
                        payload,
                    };
                    // ACT-24: a child's result is also in the queue, written by the child's
                    // final commit; delivered here, its item is acked. A parent that was
                    // cancelled meanwhile has no bookmark left: the item is acked too. A
                    // busy parent keeps it for the queue worker.
                    let queued = outbox.take_child_result(&(instance_id.clone(), bookmark_id));
                    let Some((item_id, stimulus_id)) = queued else {
                        let _ = self
                            .run_path
                            .run(&instance_id, RunOptions::to(target))
                            .await;
                        continue;
                    };
                    // RT-19: the parent's commit deletes the item with its receipt.
                    let delivery = Delivery::kept(stimulus_id).consuming(Some(item_id.clone()));
                    let delivered = self
                        .run_path
                        .run(&instance_id, RunOptions::to(target).delivering(delivery))
                        .await;
                    if matches!(
                        delivered,
                        Ok(_)
                            | Err(RunError::BookmarkNotFound { .. } | RunError::NotRunnable { .. })
                    ) && let Err(error) = self.run_path.store().ack_queue_item(&item_id).await
                    {
                        tracing::warn!(%item_id, %error, "a delivered child result stays queued; the worker finds it consumed");
                    }
                }
            }
        }
    }
}
