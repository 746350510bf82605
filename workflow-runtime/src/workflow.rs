//! The workflow trait: what the runtime needs to know about a workflow type.
//!
//! `#[state_machine]` and `workflow!` implement these traits; everything they emit can be
//! written by hand against this public API (see the `order` example in `examples/`).

use serde::Serialize;
use serde::de::DeserializeOwned;
use workflow_model::Definition;

use crate::engine::registry::Registry;

/// A workflow type: a stable name, a definition built once, and the user code its activities
/// reference by name.
///
/// Implemented by the macros; implement it by hand for a workflow written against the model:
///
/// ```
/// use std::sync::OnceLock;
/// use workflow_runtime::model::{Definition, Task};
/// use workflow_runtime::{Registry, Workflow, TaskContext};
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Counter { count: u32 }
///
/// struct Count;
///
/// impl Workflow for Count {
///     type Data = Counter;
///     fn name() -> &'static str { "Count" }
///     fn definition() -> &'static Definition {
///         static DEFINITION: OnceLock<Definition> = OnceLock::new();
///         DEFINITION.get_or_init(|| Definition::new("Count", Task::new("root", "count")))
///     }
///     fn registry() -> Registry<Counter> {
///         Registry::new().task("count", |ctx: &mut TaskContext<Counter>| {
///             Box::pin(async move {
///                 ctx.data_mut().count += 1;
///                 Ok(workflow_runtime::Outcome::done())
///             })
///         })
///     }
/// }
///
/// assert_eq!(Count::version().len(), 64);
/// ```
pub trait Workflow: Send + Sync + 'static {
    /// The workflow's data, persisted with every instance as JSON (ENG-43).
    type Data: Serialize + DeserializeOwned + Send + Sync + 'static;

    /// The stable name instances are pinned to (ENG-44). Renaming the Rust type must not
    /// change it.
    fn name() -> &'static str;

    /// The definition, built once.
    fn definition() -> &'static Definition;

    /// The version fingerprint of [`Workflow::definition`] (ENG-44).
    ///
    /// The default computes it from the definition on every call; the macros override it with
    /// the value they computed at compile time.
    fn version() -> &'static str {
        crate::engine::registry::leak_version(Self::definition())
    }

    /// The user code the definition refers to by name: tasks, entries, exits, actions and
    /// conditions.
    fn registry() -> Registry<Self::Data>;

    /// The flow-control queues the definition's tasks and runs use (QU-10, QU-14), declared
    /// with the runtime by [`RuntimeBuilder::register`](crate::RuntimeBuilder::register). The
    /// macros list the queues they were given by path; the default is none.
    fn queues() -> Vec<workflow_model::Queue> {
        Vec::new()
    }
}

/// A workflow whose root is a state machine, with a typed current state.
pub trait StateMachineWorkflow: Workflow {
    /// The typed state: the enum the machine was declared on.
    type State: Copy + Eq + std::fmt::Debug + Send + Sync + 'static;

    /// The state's name in the definition.
    fn state_name(state: Self::State) -> &'static str;

    /// The state named `name`, if the machine declares it.
    fn state_from_name(name: &str) -> Option<Self::State>;
}

/// How the waiting instances of a previous version `Old` of a state machine map to this
/// version (ENG-54), used by [`Runtime::migrate`](crate::Runtime::migrate): plain Rust that
/// rustc checks. A state of `Old` left out of the `match` is a non-exhaustive-match error, and
/// a state this version does not declare does not compile.
///
/// # Examples
///
/// ```
/// use workflow_runtime::{Migrate, state_machine};
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// pub struct OrderV1 { total: u64 }
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// pub struct Order { total: u64, currency: String }
///
/// mod v1 {
///     #[workflow_runtime::state_machine(data = super::OrderV1, initial = New, name = "order")]
///     pub enum OrderFlow {
///         #[on(pay: event("payment") => Paid)]
///         New,
///         Paid,
///     }
/// }
///
/// #[state_machine(data = Order, initial = Open, name = "order")]
/// pub enum OrderFlow {
///     #[on(pay: event("payment") => Paid)]
///     Open,
///     Paid,
/// }
///
/// impl Migrate<v1::OrderFlow> for OrderFlow {
///     fn state(old: v1::OrderFlow) -> Self {
///         match old {
///             v1::OrderFlow::New => OrderFlow::Open,
///             v1::OrderFlow::Paid => OrderFlow::Paid,
///         }
///     }
///     fn data(old: OrderV1) -> Order {
///         Order { total: old.total, currency: "EUR".to_owned() }
///     }
/// }
///
/// fn main() {
///     let moved = <OrderFlow as Migrate<v1::OrderFlow>>::state(v1::OrderFlow::New);
///     assert_eq!(moved, OrderFlow::Open);
/// }
/// ```
pub trait Migrate<Old: StateMachineWorkflow>: StateMachineWorkflow {
    /// The state of this version an instance waiting in `old` moves to.
    fn state(old: Old::State) -> Self::State;

    /// The data of this version made from the instance's data of `Old`.
    fn data(old: Old::Data) -> Self::Data;
}

/// The bound of the typed stimulus constructors the macros generate (`OrderFlow::payment(key,
/// Payment { .. })`): implemented only by the event's own payload type, so that sending
/// another type is a compile error at the send site.
#[diagnostic::on_unimplemented(
    message = "this event's payload is `{T}`, not `{Self}`",
    label = "expected a `{T}` payload",
    note = "the workflow declares the event as `event::<{T}>(..)`; send a `{T}`, or use `Stimulus::new(..)` for an untyped send"
)]
pub trait IsPayload<T> {}

impl<T> IsPayload<T> for T {}

/// The bound of a typed key on the generated stimulus constructors (`.key(order_id: String)`
/// makes `OrderFlow::payment(key, ..)` take an `IsKey<String>`): implemented by the key
/// field's type and a reference to it, and by `&str` for a `String` field, so that a key of
/// another type, which would never match the field, is a compile error at the send site.
#[diagnostic::on_unimplemented(
    message = "this event's key is a `{T}`, not `{Self}`",
    label = "expected a `{T}` key",
    note = "the event is declared with `.key(field: {T})`; send a `{T}`, or use `Stimulus::new(..)` for an untyped send"
)]
pub trait IsKey<T> {}

impl<T> IsKey<T> for T {}

impl<T> IsKey<T> for &T {}

#[diagnostic::do_not_recommend]
impl IsKey<String> for &str {}
