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

/// Where a waiting instance of a workflow can be, by name (ENG-54, ENG-55): a state
/// machine's state, or a waiting node of a `workflow!` flowchart or sequence. The positions
/// are what a [`Migrate`] implementation maps.
///
/// Every [`StateMachineWorkflow`] has its states as positions. `workflow!` implements it with
/// a generated enum `<Name>Node`: one variant per top-level node (or step) where an instance
/// can wait and be migrated (an `event`, an `after`, a `start_at` or a `cron` that is not a
/// trigger), named in `UpperCamelCase` (`wait_payment` is `WaitPayment`).
///
/// # Examples
///
/// ```
/// use workflow_runtime::{Positioned, workflow};
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// pub struct Order;
///
/// workflow! {
///     pub workflow Shipping(Order) {
///         wait_payment = event("payment");
///         cool_off = after(secs(60));
///         start -> wait_payment -> cool_off;
///     }
/// }
///
/// assert_eq!(Shipping::position_name(ShippingNode::WaitPayment), "wait_payment");
/// assert_eq!(Shipping::position_from_name("cool_off"), Some(ShippingNode::CoolOff));
/// ```
pub trait Positioned: Workflow {
    /// The positions: the state enum of a state machine, `<Name>Node` of a `workflow!`.
    type Position: Copy + Eq + std::fmt::Debug + Send + Sync + 'static;

    /// The position's name in the definition: the state's or the node's id.
    fn position_name(position: Self::Position) -> &'static str;

    /// The position named `name`, if the workflow has one.
    fn position_from_name(name: &str) -> Option<Self::Position>;
}

impl<T: StateMachineWorkflow> Positioned for T {
    type Position = T::State;

    fn position_name(position: T::State) -> &'static str {
        T::state_name(position)
    }

    fn position_from_name(name: &str) -> Option<T::State> {
        T::state_from_name(name)
    }
}

/// How the waiting instances of a previous version `Old` map to this version (ENG-54,
/// ENG-55), used by [`Runtime::migrate`](crate::Runtime::migrate): plain Rust that rustc
/// checks. For a state machine, `state` maps the old state enum to the new one; for a
/// `workflow!`, it maps the old `<Name>Node` enum to the new one (both kept in the crate, the
/// old one in a module such as `v1`). A position of `Old` left out of the `match` is a
/// non-exhaustive-match error, and a position this version does not have does not compile.
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
///
/// The same for two versions of a `workflow!` flowchart:
///
/// ```
/// use workflow_runtime::{Migrate, workflow};
///
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// pub struct Order;
///
/// mod v1 {
///     use super::Order;
///     workflow_runtime::workflow! {
///         #[workflow(name = "shipping")]
///         pub workflow Shipping(Order) {
///             paid = event("payment");
///             shipped = event("shipped");
///             start -> paid -> shipped;
///         }
///     }
/// }
///
/// workflow! {
///     #[workflow(name = "shipping")]
///     pub workflow Shipping(Order) {
///         wait_payment = event("payment");
///         packed = event("packed");
///         shipped = event("shipped");
///         start -> wait_payment -> packed -> shipped;
///     }
/// }
///
/// impl Migrate<v1::Shipping> for Shipping {
///     fn state(old: v1::ShippingNode) -> ShippingNode {
///         match old {
///             v1::ShippingNode::Paid => ShippingNode::WaitPayment,
///             v1::ShippingNode::Shipped => ShippingNode::Shipped,
///         }
///     }
///     fn data(old: Order) -> Order {
///         old
///     }
/// }
///
/// fn main() {
///     let moved = <Shipping as Migrate<v1::Shipping>>::state(v1::ShippingNode::Paid);
///     assert_eq!(moved, ShippingNode::WaitPayment);
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not say how the instances of `{Old}` move to it",
    label = "`{Self}` does not implement `Migrate<{Old}>`",
    note = "implement `workflow_runtime::Migrate<{Old}>` for `{Self}`: `fn state` maps each old state (or waiting node) to a new one, `fn data` the old data to the new"
)]
pub trait Migrate<Old: Positioned>: Positioned {
    /// The position of this version (a state, or a waiting node of a `workflow!`) an
    /// instance waiting at `old` moves to.
    fn state(old: Old::Position) -> Self::Position;

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
