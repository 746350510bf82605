//! The definition model: a workflow as plain data.
//!
//! Every type here is `serde`-(de)serializable; the JSON form is documented in the crate docs.
//! Unknown fields are rejected on load, so a typo in a JSON definition is an error, not a
//! silently ignored setting.

use serde::{Deserialize, Serialize};

/// A workflow definition: a stable name and the root activity that runs when an instance starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Definition {
    /// The stable name instances are pinned to (ENG-44), e.g. `"OrderFlow"`.
    pub name: String,
    /// Free text for people; not part of the fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The activity an instance runs; its id is conventionally `root`.
    pub root: Activity,
    /// The workflow's default retry policy (FLT-2): a task's own policy overrides it field by
    /// field, and it overrides the runtime's defaults. Absent: the runtime's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// The workflow-level commit strategy (ENG-32). Absent: the runtime's default (`run_end`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_strategy: Option<CommitStrategy>,
    /// When a trigger or a start may create a new instance (RT-15, RT-16).
    /// Absent: `always`. A routing setting, not part of the version fingerprint: changing it
    /// does not pin instances to a new version. JSON and builder only (no macro option yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation: Option<Activation>,
    /// The flow-control queue every run of an instance takes a slot of (QU-14): from the
    /// start or resume of the run to its suspension or end. Absent: runs take no slot. A
    /// runtime setting like `activation`, not part of the version fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
}

impl Definition {
    /// A definition named `name` whose root is `root`.
    pub fn new(name: impl Into<String>, root: impl Into<Activity>) -> Self {
        Self {
            name: name.into(),
            description: None,
            root: root.into(),
            retry: None,
            commit_strategy: None,
            activation: None,
            queue: None,
        }
    }

    /// With a flow-control queue every run of an instance takes a slot of (QU-14).
    #[must_use]
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// With an activation strategy (RT-15).
    #[must_use]
    pub fn with_activation(mut self, activation: Activation) -> Self {
        self.activation = Some(activation);
        self
    }
}

/// The set of outcome ports an activity may complete with (FC-2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ports<'a> {
    /// Any port name may be connected and any outcome accepted (a JSON task without `ports`).
    Open,
    /// Exactly these ports.
    Declared(Vec<&'a str>),
}

impl Ports<'_> {
    /// Whether `port` may be connected.
    pub fn contains(&self, port: &str) -> bool {
        match self {
            Ports::Open => true,
            Ports::Declared(ports) => ports.contains(&port),
        }
    }
}

/// The default outcome of an activity that completes without naming one (FC-2).
pub const DONE: &str = "done";

/// The outcome of a `compensate_then_continue` saga scope after compensating (FLT-12).
pub const COMPENSATED: &str = "compensated";

macro_rules! activity_kinds {
    ($( $(#[$doc:meta])* $variant:ident($ty:ident) = $name:literal, )*) => {
        /// One activity: a node of a flowchart, a step of a sequence, a slot of a state machine,
        /// or a workflow's root. Serialized with its kind in the field `kind`.
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(tag = "kind", rename_all = "snake_case")]
        pub enum Activity {
            $( $(#[$doc])* $variant($ty), )*
        }

        impl Activity {
            /// Every activity kind's name, as written in the `kind` field.
            pub const KINDS: &'static [&'static str] = &[$($name),*];

            /// The activity's id, unique among its siblings (FC-1, SM-C3).
            pub fn id(&self) -> &str {
                match self { $( Activity::$variant(a) => &a.id, )* }
            }

            /// A mutable reference to the activity's id.
            pub fn id_mut(&mut self) -> &mut String {
                match self { $( Activity::$variant(a) => &mut a.id, )* }
            }

            /// The kind's name, as written in the `kind` field (`"task"`, `"state_machine"`, ...).
            pub fn kind_name(&self) -> &'static str {
                match self { $( Activity::$variant(_) => $name, )* }
            }
        }

        $(
            impl From<$ty> for Activity {
                fn from(value: $ty) -> Self {
                    Activity::$variant(value)
                }
            }
        )*
    };
}

activity_kinds! {
    /// A user async fn (ACT-11).
    Task(Task) = "task",
    /// A saga scope around a sequence or flowchart (FLT-10).
    Saga(Saga) = "saga",
    /// A wait for a named stimulus (ACT-19).
    Event(Event) = "event",
    /// A durable wait for a duration or until an instant (ACT-20).
    Delay(Delay) = "delay",
    /// A repeating timer (ACT-21).
    Timer(Timer) = "timer",
    /// A wait until an instant (ACT-22).
    StartAt(StartAt) = "start_at",
    /// A wait for the next occurrence of a cron expression (ACT-23).
    Cron(Cron) = "cron",
    /// Ordered children run one after the other (ACT-12).
    Sequence(Sequence) = "sequence",
    /// Nodes joined by connections (FC-1 to FC-5).
    Flowchart(Flowchart) = "flowchart",
    /// Named states joined by transitions (SM-1 to SM-8).
    StateMachine(StateMachine) = "state_machine",
    /// A decision (ACT-13).
    If(If) = "if",
    /// A multi-way decision (ACT-14).
    Switch(Switch) = "switch",
    /// A loop while a condition holds (ACT-15).
    While(While) = "while",
    /// A sequential loop over items (ACT-16).
    ForEach(ForEach) = "for_each",
    /// A parallel loop over items (ACT-17).
    ParallelForEach(ParallelForEach) = "parallel_for_each",
    /// The structured fork: child branches run side by side (ACT-18).
    Parallel(Parallel) = "parallel",
    /// The flowchart fork node: completes at once with all its branch ports (FC-19).
    Fork(Fork) = "fork",
    /// The flowchart join node (FC-17).
    Join(Join) = "join",
    /// A no-op milestone that completes at once (FC-6 step 3).
    Start(Start) = "start",
    /// A terminal node that completes its flowchart (FC-20).
    End(End) = "end",
    /// Finishes the whole instance (ACT-25).
    Finish(Finish) = "finish",
    /// Completes the nearest enclosing loop (ACT-29).
    Break(Break) = "break",
    /// Fails at once with a permanent error (ACT-26).
    Fault(Fault) = "fault",
    /// Sets the instance's correlation id (ACT-27).
    Correlate(Correlate) = "correlate",
    /// Assigns a variable (ACT-28).
    SetVariable(SetVariable) = "set_variable",
    /// Starts a child instance and, by default, waits for it (ACT-24).
    SubWorkflow(SubWorkflow) = "sub_workflow",
}

impl Activity {
    /// The outcome ports this activity declares (FC-2; each kind's ports: ACT-11 to ACT-29).
    pub fn ports(&self) -> Ports<'_> {
        fn declared(ports: &[String]) -> Vec<&str> {
            ports.iter().map(String::as_str).collect()
        }
        match self {
            Activity::Task(t) => match &t.ports {
                Some(ports) => Ports::Declared(declared(ports)),
                None => Ports::Open,
            },
            Activity::Event(e) => {
                let mut ports = match &e.ports {
                    Some(ports) => declared(ports),
                    None => vec![DONE],
                };
                if e.deadline_ms.is_some() {
                    ports.push("timeout");
                }
                Ports::Declared(ports)
            }
            // Structured forms run their children and complete with `done` (ACT-13, ACT-14);
            // as flowchart nodes they have no children and route by decision ports.
            Activity::If(i) if i.then.is_some() || i.r#else.is_some() => {
                Ports::Declared(vec![DONE])
            }
            Activity::Switch(s)
                if s.default.is_some() || s.cases.iter().any(|c| c.body.is_some()) =>
            {
                Ports::Declared(vec![DONE])
            }
            Activity::If(_) => Ports::Declared(vec!["true", "false"]),
            Activity::Switch(s) => {
                let mut ports: Vec<&str> = s.cases.iter().map(|c| c.label.as_str()).collect();
                ports.push("default");
                Ports::Declared(ports)
            }
            Activity::Fork(f) => Ports::Declared(declared(&f.branches)),
            Activity::SubWorkflow(s) => {
                let mut ports = vec![DONE, "cancelled"];
                if s.deadline_ms.is_some() {
                    ports.push("timeout");
                }
                Ports::Declared(ports)
            }
            Activity::Saga(s) => match s.on_failure {
                SagaOnFailure::CompensateThenFault => Ports::Declared(vec![DONE]),
                SagaOnFailure::CompensateThenContinue => Ports::Declared(vec![DONE, COMPENSATED]),
            },
            Activity::End(_) | Activity::Finish(_) | Activity::Break(_) | Activity::Fault(_) => {
                Ports::Declared(Vec::new())
            }
            Activity::Delay(_)
            | Activity::Timer(_)
            | Activity::StartAt(_)
            | Activity::Cron(_)
            | Activity::Sequence(_)
            | Activity::Flowchart(_)
            | Activity::StateMachine(_)
            | Activity::While(_)
            | Activity::ForEach(_)
            | Activity::ParallelForEach(_)
            | Activity::Parallel(_)
            | Activity::Join(_)
            | Activity::Start(_)
            | Activity::Correlate(_)
            | Activity::SetVariable(_) => Ports::Declared(vec![DONE]),
        }
    }

    /// Whether this node is marked as a trigger that can start the workflow (ACT-7).
    pub fn is_trigger(&self) -> bool {
        match self {
            Activity::Event(e) => e.trigger,
            Activity::Timer(t) => t.trigger,
            Activity::StartAt(s) => s.trigger,
            Activity::Cron(c) => c.trigger,
            _ => false,
        }
    }

    /// Whether this is a terminal kind that may have no outbound connections (FC-20).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Activity::End(_) | Activity::Finish(_) | Activity::Break(_) | Activity::Fault(_)
        )
    }

    /// Whether running this activity can wait or change data (FC-27): a loop made only of
    /// activities that cannot would never end (FC-V12).
    pub fn can_wait_or_change_data(&self) -> bool {
        match self {
            Activity::Task(_)
            | Activity::SetVariable(_)
            | Activity::Event(_)
            | Activity::Delay(_)
            | Activity::Timer(_)
            | Activity::StartAt(_)
            | Activity::SubWorkflow(_) => true,
            Activity::Cron(c) => !c.trigger,
            _ => self.children().any(Activity::can_wait_or_change_data),
        }
    }

    /// The direct child activities, in declaration order (for a state machine: each state's
    /// entry and exit, then each transition's trigger and action).
    pub fn children(&self) -> impl Iterator<Item = &Activity> {
        let mut out: Vec<&Activity> = Vec::new();
        match self {
            Activity::Sequence(s) => out.extend(&s.steps),
            Activity::Flowchart(f) => out.extend(&f.nodes),
            Activity::StateMachine(m) => {
                for state in &m.states {
                    out.extend(state.entry.as_ref());
                    out.extend(state.exit.as_ref());
                }
                for transition in &m.transitions {
                    out.extend(transition.trigger.as_ref());
                    out.extend(transition.action.as_ref());
                }
            }
            Activity::If(i) => {
                out.extend(i.then.as_deref());
                out.extend(i.r#else.as_deref());
            }
            Activity::Switch(s) => {
                out.extend(s.cases.iter().filter_map(|c| c.body.as_ref()));
                out.extend(s.default.as_deref());
            }
            Activity::While(w) => out.push(&w.body),
            Activity::ForEach(f) => out.push(&f.body),
            Activity::ParallelForEach(f) => out.push(&f.body),
            Activity::Parallel(p) => out.extend(&p.branches),
            Activity::Timer(t) => out.extend(t.body.as_deref()),
            Activity::Saga(s) => out.push(&s.body),
            _ => {}
        }
        out.into_iter()
    }
}

fn is_false(value: &bool) -> bool {
    !*value
}

/// A user async fn, referenced by the name it is registered under (ACT-11).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// The node id.
    pub id: String,
    /// The registry name of the user fn to run.
    pub function: String,
    /// Declared outcome ports; `None` means open in JSON (FC-2). `workflow!` always declares them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<String>>,
    /// This task's retry policy (FLT-2); unset fields fall back to the workflow's policy, then
    /// to the runtime's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// The time one attempt may take, in milliseconds (FLT-17); unlimited when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_timeout_ms: Option<u64>,
    /// The registry name of the fn that undoes this task's effect (FLT-10); it only runs inside
    /// a saga scope (FLT-V5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation: Option<String>,
    /// When the runtime commits around this task (ENG-32); absent means `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<NodeCommit>,
    /// The flow-control queue each attempt takes a slot of before it runs (QU-10); the
    /// runtime must declare it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The attempt's priority in its queue, 0 (the default) to 9 (QU-4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The dotted path of the data field whose value is the attempt's partition key in its
    /// queue (QU-4, QU-10), for example `"customer.id"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_key: Option<String>,
}

impl Task {
    /// The same task taking a slot of `queue` before each attempt (QU-10).
    #[must_use]
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// The same task taking its partition key in its queue from the data field at the dotted
    /// `path` (QU-10).
    #[must_use]
    pub fn with_queue_key(mut self, path: impl Into<String>) -> Self {
        self.queue_key = Some(path.into());
        self
    }

    /// A task `id` running the registered fn `function`, with open ports.
    pub fn new(id: impl Into<String>, function: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            function: function.into(),
            ports: None,
            retry: None,
            attempt_timeout_ms: None,
            compensation: None,
            commit: None,
            queue: None,
            priority: None,
            queue_key: None,
        }
    }

    /// The same task with a retry policy (FLT-2).
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// The same task with a compensation fn (FLT-10).
    #[must_use]
    pub fn with_compensation(mut self, function: impl Into<String>) -> Self {
        self.compensation = Some(function.into());
        self
    }

    /// The same task with declared outcome ports.
    #[must_use]
    pub fn with_ports<I, S>(mut self, ports: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.ports = Some(ports.into_iter().map(Into::into).collect());
        self
    }
}

/// A wait for a named stimulus with an optional correlation key (ACT-19).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// The node id.
    pub id: String,
    /// The stimulus name (RT-2).
    pub event: String,
    /// The key path into the workflow data whose value correlates the stimulus (RT-3),
    /// e.g. `"order_id"` or `"customer.id"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The registry name of the type the payload decodes into, for documentation and diagrams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<String>,
    /// Whether this node can start the workflow (ACT-7).
    #[serde(default, skip_serializing_if = "is_false")]
    pub trigger: bool,
    /// Declared outcome ports chosen by the payload (ACT-19); `None` means `done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<String>>,
    /// A deadline in milliseconds after which the `timeout` outcome is taken (TM-14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// Which queued stimuli this wait may take (RT-30); absent: `since_origin` (a
    /// `#[state_machine]` writes `since_entered` for its transitions unless told otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub look_back: Option<LookBack>,
    /// How the payload is folded into the data when the event completes (ACT-19); absent: the
    /// payload is only the event's output (the next activity's input, ACT-5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assign: Option<PayloadAssign>,
}

/// How an event's payload is folded into the workflow data when the event completes (ACT-19).
///
/// In JSON: `"assign": {"field": "decision"}` or `"assign": {"function": "take_payment"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PayloadAssign {
    /// Writes the payload at this field path of the data's JSON form (`"decision"`,
    /// `"order.payment"`); every field on the way must exist. The data must still decode
    /// afterwards, else the stimulus is rejected for the instance (RT-22).
    Field(String),
    /// The registry name of an assign fn `(data, payload)` (`Registry::assign`).
    Function(String),
}

/// Which *queued* stimuli a waiting event may take (RT-30, RT-31). Live delivery
/// (the wait exists when the stimulus is sent) is unaffected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum LookBack {
    /// Only stimuli sent at or after the wait's creation.
    None,
    /// Stimuli sent at or after the instance's origin (the send time of the stimulus that
    /// started it, or of the start call): a reply that overtakes the wait is kept.
    #[default]
    SinceOrigin,
    /// Stimuli sent at or after the moment the transition into the state machine's current
    /// state was caused: the send time of the stimulus whose run took that transition, or
    /// the due time of the timer that fired it; in the initial state (and for a wait outside
    /// a state machine), the instance's origin, as `SinceOrigin`. So an event sent while the
    /// machine was in a state that does not wait for it is not taken later, when it enters a
    /// state that does: it stays queued until its TTL and is then dead-lettered `Expired`.
    ///
    /// The default of a `#[state_machine]` transition (`since_entered` in JSON).
    SinceEntered,
    /// Stimuli sent at or after the wait's creation minus `ms` milliseconds.
    Window {
        /// The window in milliseconds.
        ms: u64,
    },
    /// Any queued stimulus still within its TTL.
    Any,
}

impl Event {
    /// A wait with node id `id` for the stimulus named `event`.
    pub fn new(id: impl Into<String>, event: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            event: event.into(),
            key: None,
            payload: None,
            trigger: false,
            ports: None,
            deadline_ms: None,
            look_back: None,
            assign: None,
        }
    }

    /// With a payload assignment (ACT-19).
    #[must_use]
    pub fn with_assign(mut self, assign: PayloadAssign) -> Self {
        self.assign = Some(assign);
        self
    }

    /// With a look-back policy (RT-30).
    #[must_use]
    pub fn with_look_back(mut self, look_back: LookBack) -> Self {
        self.look_back = Some(look_back);
        self
    }

    /// The same event correlated by the key path `key` into the data.
    #[must_use]
    pub fn with_key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
}

/// A durable wait (ACT-20).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delay {
    /// The node id.
    pub id: String,
    /// A constant duration in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The registry name of a fn over the data that computes the duration or instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

impl Delay {
    /// A delay with node id `id` of `duration_ms` milliseconds.
    pub fn new(id: impl Into<String>, duration_ms: u64) -> Self {
        Self {
            id: id.into(),
            duration_ms: Some(duration_ms),
            until: None,
        }
    }
}

/// A repeating timer (ACT-21).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timer {
    /// The node id.
    pub id: String,
    /// The interval between ticks in milliseconds (> 0, ACT-V9).
    pub interval_ms: u64,
    /// The activity run on every tick.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Box<Activity>>,
    /// The registry name of a condition that stops the timer when true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Stop after this many ticks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ticks: Option<u64>,
    /// Whether this node can start the workflow (ACT-7).
    #[serde(default, skip_serializing_if = "is_false")]
    pub trigger: bool,
    /// What a trigger does with the ticks it missed while no process ran (TM-19);
    /// [`Missed::Once`] when absent.
    #[serde(default, skip_serializing_if = "Missed::is_default")]
    pub missed: Missed,
}

/// A wait until an instant (ACT-22).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartAt {
    /// The node id.
    pub id: String,
    /// A constant instant, RFC 3339; with `time_zone`, a local date and time without an
    /// offset (`2026-03-29T02:30:00`) is read in that zone (TM-16 to TM-18).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The zone a local `at` is read in: `UTC`, a fixed offset or an IANA name (TM-16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// The registry name of a fn over the data that computes the instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_fn: Option<String>,
    /// Whether this node can start the workflow (ACT-7).
    #[serde(default, skip_serializing_if = "is_false")]
    pub trigger: bool,
}

/// A wait for the next occurrence of a cron expression (ACT-23).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cron {
    /// The node id.
    pub id: String,
    /// The cron expression (TM-12).
    pub expression: String,
    /// The zone the expression is read in: `UTC`, a fixed offset or an IANA name such as
    /// `Europe/Berlin` (TM-16); UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// Whether this node can start the workflow (ACT-7).
    #[serde(default, skip_serializing_if = "is_false")]
    pub trigger: bool,
    /// What a trigger does with the occurrences it missed while no process ran (TM-19);
    /// [`Missed::Once`] when absent.
    #[serde(default, skip_serializing_if = "Missed::is_default")]
    pub missed: Missed,
}

/// What a cron or repeating-timer trigger does with occurrences that fell due while no
/// process ran (TM-19).
///
/// In JSON: `"skip"`, `"once"` or `{"backfill": 5}`.
///
/// # Examples
///
/// ```
/// use workflow_model::Missed;
///
/// let policy: Missed = serde_json::from_str(r#"{"backfill": 5}"#).unwrap();
/// assert_eq!(policy, Missed::Backfill(5));
/// assert_eq!(Missed::default(), Missed::Once);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Missed {
    /// Missed occurrences start nothing; the schedule goes on at its next occurrence.
    Skip,
    /// All the missed occurrences start one instance together, as soon as a process runs.
    #[default]
    Once,
    /// Each missed occurrence starts its own instance, oldest first, the latest N at most.
    Backfill(u32),
}

impl Missed {
    /// Whether this is the default, [`Missed::Once`].
    pub fn is_default(&self) -> bool {
        *self == Missed::Once
    }
}

impl std::fmt::Display for Missed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missed::Skip => f.write_str("skip"),
            Missed::Once => f.write_str("once"),
            Missed::Backfill(n) => write!(f, "backfill({n})"),
        }
    }
}

/// Ordered children run one after the other (ACT-12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sequence {
    /// The node id.
    pub id: String,
    /// The steps, in order.
    #[serde(default)]
    pub steps: Vec<Activity>,
}

/// Nodes joined by connections (FC-1 to FC-5).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flowchart {
    /// The node id of the flowchart itself.
    pub id: String,
    /// Explicit start nodes (`start -> x`, FC-6 step 2). More than one is an error (FC-V6); in
    /// JSON it is written as a single string.
    #[serde(default, skip_serializing_if = "Vec::is_empty", with = "one_or_many")]
    pub start: Vec<String>,
    /// The nodes, in declaration order (FC-1).
    #[serde(default)]
    pub nodes: Vec<Activity>,
    /// The connections, in declaration order (FC-3).
    #[serde(default)]
    pub connections: Vec<Connection>,
}

/// A connection from an outcome port of one node to another node (FC-3).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// The source node id.
    pub source: String,
    /// The source port; `done` when absent.
    #[serde(default = "done_port")]
    pub port: String,
    /// The target node id.
    pub target: String,
}

fn done_port() -> String {
    DONE.to_owned()
}

impl Connection {
    /// A connection `source.port -> target`.
    pub fn new(
        source: impl Into<String>,
        port: impl Into<String>,
        target: impl Into<String>,
    ) -> Self {
        Self {
            source: source.into(),
            port: port.into(),
            target: target.into(),
        }
    }

    /// The key under which run state about this connection is persisted (FC-3):
    /// `source.port->target`.
    pub fn key(&self) -> String {
        format!("{}.{}->{}", self.source, self.port, self.target)
    }
}

/// Named states joined by ordered transitions (`docs/reference/state-machines.md`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateMachine {
    /// The node id of the machine.
    pub id: String,
    /// The state the machine starts in (SM-1).
    pub initial: String,
    /// The states, in declaration order.
    #[serde(default)]
    pub states: Vec<State>,
    /// The transitions, in declaration order, which is evaluation order.
    #[serde(default)]
    pub transitions: Vec<Transition>,
}

impl StateMachine {
    /// The transition key of the transition at `index`:
    /// `"{index}:{name}"`, or `"{index}:{from}->{to}"` when it has no name.
    pub fn transition_key(index: usize, transition: &Transition) -> String {
        match &transition.name {
            Some(name) => format!("{index}:{name}"),
            None => format!("{index}:{}->{}", transition.from, transition.to),
        }
    }

    /// The state named `name`.
    pub fn state(&self, name: &str) -> Option<&State> {
        self.states.iter().find(|s| s.name == name)
    }
}

/// A state of a state machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    /// The state's unique name (SM-C2).
    pub name: String,
    /// A name for people; not part of the fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Run when the state is entered (SM-2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<Activity>,
    /// Run when the state is left, before the transition's action (SM-5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<Activity>,
}

impl State {
    /// A state named `name` with no entry or exit.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            display_name: None,
            entry: None,
            exit: None,
        }
    }
}

/// A directed transition between two states.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transition {
    /// A machine-readable name, unique within the machine (SM-C3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A name for people; not part of the fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The source state.
    pub from: String,
    /// The target state.
    pub to: String,
    /// What the transition waits for; `None` makes it automatic (SM-3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<Activity>,
    /// The registry name of the condition (`fn(&Data[, &Payload]) -> bool`); absent means true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// Run after the source's exit and before the target's entry (SM-5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<Activity>,
}

impl Transition {
    /// An automatic, unnamed transition `from -> to`.
    pub fn new(from: impl Into<String>, to: impl Into<String>) -> Self {
        Self {
            name: None,
            display_name: None,
            from: from.into(),
            to: to.into(),
            trigger: None,
            condition: None,
            action: None,
        }
    }
}

/// A decision (ACT-13): structured with `then`/`else` children, or a flowchart node with the
/// ports `true` and `false`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct If {
    /// The node id.
    pub id: String,
    /// The registry name of the condition.
    pub condition: String,
    /// Run when the condition is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<Box<Activity>>,
    /// Run when the condition is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub r#else: Option<Box<Activity>>,
}

/// A multi-way decision (ACT-14).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    /// The node id.
    pub id: String,
    /// The cases, in order.
    pub cases: Vec<SwitchCase>,
    /// `first` (default) or `any`.
    #[serde(default, skip_serializing_if = "SwitchMode::is_first")]
    pub mode: SwitchMode,
    /// Run when no case matches (structured form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Box<Activity>>,
}

/// One case of a [`Switch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchCase {
    /// The case label, also its port name (ACT-V2, ACT-V3).
    pub label: String,
    /// The registry name of the condition.
    pub condition: String,
    /// Run when the case matches (structured form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Activity>,
}

/// How a [`Switch`] picks cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SwitchMode {
    /// The first matching case.
    #[default]
    First,
    /// Every matching case.
    Any,
}

impl SwitchMode {
    fn is_first(&self) -> bool {
        *self == SwitchMode::First
    }
}

/// A loop while a condition holds (ACT-15).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct While {
    /// The node id.
    pub id: String,
    /// The registry name of the condition checked before each iteration.
    pub condition: String,
    /// The loop body.
    pub body: Box<Activity>,
}

/// A sequential loop over items (ACT-16).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForEach {
    /// The node id.
    pub id: String,
    /// The registry name of the fn that lists the items.
    pub items: String,
    /// The loop body.
    pub body: Box<Activity>,
}

/// A parallel loop over items (ACT-17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelForEach {
    /// The node id.
    pub id: String,
    /// The registry name of the fn that lists the items.
    pub items: String,
    /// The loop body.
    pub body: Box<Activity>,
    /// At most this many bodies live at once; unlimited when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
}

/// The structured fork (ACT-18).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parallel {
    /// The node id.
    pub id: String,
    /// The branches, in order.
    #[serde(default)]
    pub branches: Vec<Activity>,
    /// `all` (default) or `any`.
    #[serde(default, skip_serializing_if = "ParallelMode::is_all")]
    pub mode: ParallelMode,
}

/// When a [`Parallel`] completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParallelMode {
    /// When every branch has completed.
    #[default]
    All,
    /// When the first branch completes; the others are cancelled.
    Any,
}

impl ParallelMode {
    fn is_all(&self) -> bool {
        *self == ParallelMode::All
    }
}

/// The flowchart fork node (FC-19).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fork {
    /// The node id.
    pub id: String,
    /// The branch port names (at least one, unique: FC-V15).
    pub branches: Vec<String>,
}

/// The flowchart join node (FC-17); its mode has no default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Join {
    /// The node id.
    pub id: String,
    /// `all` or `any`.
    pub mode: JoinMode,
}

/// How a [`Join`] waits (FC-17).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinMode {
    /// WaitAll: runs only if every forward inbound connection was followed.
    All,
    /// WaitAny: runs on the first followed arrival and cancels the other branches.
    Any,
}

macro_rules! id_only {
    ($($(#[$doc:meta])* $name:ident),*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// The node id.
            pub id: String,
        }

        impl $name {
            /// The node with id `id`.
            pub fn new(id: impl Into<String>) -> Self {
                Self { id: id.into() }
            }
        }
    )*};
}

id_only! {
    /// A no-op milestone (FC-6 step 3).
    Start,
    /// A terminal node that completes its flowchart (FC-20).
    End,
    /// Completes the nearest enclosing loop (ACT-29).
    Break
}

/// Finishes the whole instance (ACT-25).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Finish {
    /// The node id.
    pub id: String,
    /// The registry name of a fn computing the instance output from the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// Fails at once with a permanent error (ACT-26).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fault {
    /// The node id.
    pub id: String,
    /// The error code.
    pub code: String,
    /// The error message.
    #[serde(default)]
    pub message: String,
}

/// Sets the instance's correlation id (ACT-27).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Correlate {
    /// The node id.
    pub id: String,
    /// The registry name of the fn computing the key from the data.
    pub key: String,
}

/// Assigns a variable (ACT-28).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetVariable {
    /// The node id.
    pub id: String,
    /// The variable's name.
    pub variable: String,
    /// The registry name of the fn computing the value.
    pub value: String,
}

/// Starts a child instance (ACT-24).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubWorkflow {
    /// The node id.
    pub id: String,
    /// The child workflow's registered name.
    pub workflow: String,
    /// The registry name of the fn computing the child's input from the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// The registry name of the fn folding the child's output into the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assign: Option<String>,
    /// `wait` (default) or `detach`.
    #[serde(default, skip_serializing_if = "SubWorkflowMode::is_wait")]
    pub mode: SubWorkflowMode,
    /// A deadline in milliseconds after which the `timeout` outcome is taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
}

/// Whether a [`SubWorkflow`] waits for its child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubWorkflowMode {
    /// Wait for the child's final status.
    #[default]
    Wait,
    /// Complete once the child is created.
    Detach,
}

impl SubWorkflowMode {
    fn is_wait(&self) -> bool {
        *self == SubWorkflowMode::Wait
    }
}

/// `start` is one name or a list in memory; JSON writes one name as a string.
mod one_or_many {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }

    pub(super) fn serialize<S: Serializer>(value: &[String], s: S) -> Result<S::Ok, S::Error> {
        match value {
            [one] => one.serialize(s),
            many => many.serialize(s),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        Ok(match OneOrMany::deserialize(d)? {
            OneOrMany::One(one) => vec![one],
            OneOrMany::Many(many) => many,
        })
    }
}

/// A retry policy (FLT-2). Every field is optional: an unset field falls back to the
/// workflow's policy ([`Definition::retry`]), then to the runtime's default (in brackets).
///
/// `multiplier` and `jitter` are fixed-point decimals ([`Decimal`]) so that the model stays
/// `Eq` and fingerprints are exact; in JSON they are plain numbers such as `2` or `0.2`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Total attempts including the first; 1 means no retry (3). At least 1 (FLT-V1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// The wait after the first failed attempt, before jitter, in milliseconds (1 000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay_ms: Option<u64>,
    /// The cap on a wait, applied before jitter, in milliseconds (60 000). Not below
    /// `initial_delay_ms` (FLT-V2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delay_ms: Option<u64>,
    /// The exponential growth factor, at least 1 (2.0; FLT-V3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiplier: Option<Decimal>,
    /// The fraction in [0, 1] by which each wait may be shortened at random (0.2; FLT-V3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<Decimal>,
    /// The error codes that are retried (FLT-1); absent means every retryable error. A
    /// permanent error never retries, listed or not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<Vec<String>>,
}

impl RetryPolicy {
    /// The runtime's default for `max_attempts` (FLT-2).
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
    /// The runtime's default for `initial_delay_ms` (FLT-2).
    pub const DEFAULT_INITIAL_DELAY_MS: u64 = 1_000;
    /// The runtime's default for `max_delay_ms` (FLT-2).
    pub const DEFAULT_MAX_DELAY_MS: u64 = 60_000;
    /// The runtime's default for `multiplier` (FLT-2).
    pub const DEFAULT_MULTIPLIER: Decimal = Decimal::from_millis(2_000);
    /// The runtime's default for `jitter` (FLT-2).
    pub const DEFAULT_JITTER: Decimal = Decimal::from_millis(200);

    /// This policy with every unset field taken from `fallback` (a node's policy over the
    /// workflow's, FLT-2).
    #[must_use]
    pub fn or(&self, fallback: &RetryPolicy) -> RetryPolicy {
        RetryPolicy {
            max_attempts: self.max_attempts.or(fallback.max_attempts),
            initial_delay_ms: self.initial_delay_ms.or(fallback.initial_delay_ms),
            max_delay_ms: self.max_delay_ms.or(fallback.max_delay_ms),
            multiplier: self.multiplier.or(fallback.multiplier),
            jitter: self.jitter.or(fallback.jitter),
            retry_on: self.retry_on.clone().or_else(|| fallback.retry_on.clone()),
        }
    }
}

/// A fixed-point decimal with three fractional digits (thousandths), written in JSON as a
/// number: `2`, `1.5`, `0.2`. Finer digits are rounded to the nearest thousandth on load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Decimal(i64);

impl Decimal {
    /// One.
    pub const ONE: Decimal = Decimal(1_000);

    /// The decimal `millis / 1000`.
    pub const fn from_millis(millis: i64) -> Self {
        Decimal(millis)
    }

    /// The value in thousandths.
    pub const fn millis(self) -> i64 {
        self.0
    }

    /// The value as a float, for computing waits.
    #[allow(clippy::cast_precision_loss)]
    pub fn to_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    /// The nearest decimal to `value`, or `None` if it is not finite or out of range.
    #[allow(clippy::cast_possible_truncation)]
    pub fn from_f64(value: f64) -> Option<Self> {
        let scaled = (value * 1000.0).round();
        (scaled.is_finite() && scaled.abs() < 9.0e15).then_some(Decimal(scaled as i64))
    }
}

impl std::fmt::Display for Decimal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let (int, frac) = (abs / 1000, abs % 1000);
        if frac == 0 {
            write!(f, "{sign}{int}")
        } else {
            let digits = format!("{frac:03}");
            write!(f, "{sign}{int}.{}", digits.trim_end_matches('0'))
        }
    }
}

impl Serialize for Decimal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0 % 1000 == 0 {
            s.serialize_i64(self.0 / 1000)
        } else {
            s.serialize_f64(self.to_f64())
        }
    }
}

impl<'de> Deserialize<'de> for Decimal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = f64::deserialize(d)?;
        Decimal::from_f64(value)
            .ok_or_else(|| serde::de::Error::custom(format!("`{value}` is not a usable number")))
    }
}

/// A definition's activation strategy (RT-15): when a trigger or a start may
/// create a new instance. An unknown name in JSON is a load error (RT-16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// Always (the default).
    #[default]
    Always,
    /// Only while no non-final instance of the same definition name exists.
    Singleton,
    /// Only while no non-final instance of any definition has the correlation id.
    Correlation,
    /// Only while no non-final instance of the same definition has the correlation id.
    CorrelatedSingleton,
}

/// The workflow-level commit strategy (ENG-32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum CommitStrategy {
    /// Only the mandatory commits (the runtime's default).
    RunEnd,
    /// A commit before each activity.
    BeforeEachActivity,
    /// A commit after each activity.
    AfterEachActivity,
    /// A commit at most every `interval_ms` milliseconds of a run.
    Periodic {
        /// The interval in milliseconds (> 0).
        interval_ms: u64,
    },
}

/// The per-node commit setting (ENG-32): the node decides first, `default` defers to the
/// workflow's strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeCommit {
    /// Defer to the workflow's strategy.
    #[default]
    Default,
    /// Commit before the node runs.
    Before,
    /// Commit after the node completes.
    After,
    /// Both.
    BeforeAndAfter,
    /// Suppress the workflow's strategy for this node (never a mandatory commit).
    Never,
}

/// A saga scope (FLT-10): its body, a sequence or a flowchart, is compensated newest first when
/// an activity inside fails for good (FLT-11). Making the workflow root a saga scope means
/// making the root a `Saga`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Saga {
    /// The node id.
    pub id: String,
    /// What happens after compensating (FLT-12).
    pub on_failure: SagaOnFailure,
    /// The scope's composite.
    pub body: Box<Activity>,
}

/// What a saga scope does after compensating (FLT-10, FLT-12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SagaOnFailure {
    /// Pass the failure to the next enclosing saga scope, or fault the instance.
    CompensateThenFault,
    /// Complete the scope with the outcome `compensated` (FLT-12); declares that port.
    CompensateThenContinue,
}
