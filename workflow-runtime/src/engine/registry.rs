//! The registry of user code: tasks and conditions, referenced by name from a definition.
//!
//! Persisted state never holds closures, only these names (ACT-6, ENG-12), so an
//! instance suspended in one process resumes in another that registered the same names.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use workflow_model::Definition;

pub(crate) use crate::base::BoxFuture;
pub(crate) use crate::engine::task::TaskResult;
use crate::engine::task::{TaskContext, TaskError};

pub(crate) type TaskFn<D> =
    Arc<dyn for<'a> Fn(&'a mut TaskContext<D>) -> BoxFuture<'a, TaskResult> + Send + Sync>;

pub(crate) type ConditionFn<D> =
    Arc<dyn Fn(&D, Option<&Value>) -> Result<bool, TaskError> + Send + Sync>;

pub(crate) type ValueFn<D> = Arc<dyn Fn(&D) -> Result<Value, TaskError> + Send + Sync>;

pub(crate) type AssignFn<D> = Arc<dyn Fn(&mut D, &Value) -> Result<(), TaskError> + Send + Sync>;

pub(crate) type OutcomeFn = Arc<dyn Fn(&Value) -> Result<String, TaskError> + Send + Sync>;

/// The outcome mapping of an event's payload type (ACT-19): an event node that declares its
/// ports, as in `manager = event::<Decision>("expense.decision") -> [approved, rejected]`,
/// completes with the outcome its payload chooses, and routing follows that port (FC-4).
///
/// `workflow!` requires it of the payload type of every event that declares its ports
/// (ACT-V8, a compile error on the type); a JSON definition's event finds it by its `payload`
/// name, registered with [`Registry::outcome`] and checked at build (ENG-47). An outcome the
/// event does not declare fails the event for good (FC-4).
///
/// ```
/// use workflow_runtime::ChooseOutcome;
///
/// #[derive(serde::Deserialize)]
/// struct Decision { approved: bool }
///
/// impl ChooseOutcome for Decision {
///     fn outcome(&self) -> &str {
///         if self.approved { "approved" } else { "rejected" }
///     }
/// }
/// assert_eq!(Decision { approved: false }.outcome(), "rejected");
/// ```
#[diagnostic::on_unimplemented(
    message = "an event declares outcomes but its payload type `{Self}` does not choose one",
    label = "`{Self}` does not implement `ChooseOutcome`",
    note = "implement `workflow_runtime::ChooseOutcome` for `{Self}` to choose among the event's declared ports (ACT-V8)"
)]
pub trait ChooseOutcome {
    /// The outcome port this payload chooses: one of the event's declared ports.
    fn outcome(&self) -> &str;
}

pub(crate) type ItemsFn<D> = Arc<dyn Fn(&D) -> Result<Vec<Value>, TaskError> + Send + Sync>;

/// The user code of one workflow type, by the names its definition uses.
///
/// ```
/// use workflow_runtime::{Outcome, Registry, TaskContext};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Order { total: u64, paid: u64 }
///
/// #[derive(serde::Deserialize)]
/// struct Payment { amount: u64 }
///
/// async fn record_payment(ctx: &mut TaskContext<Order>) -> Result<Outcome, workflow_runtime::TaskError> {
///     let payment: Payment = ctx.payload()?;
///     ctx.data_mut().paid += payment.amount;
///     Ok(Outcome::done())
/// }
///
/// let registry = Registry::<Order>::new()
///     .task("record_payment", |ctx| Box::pin(record_payment(ctx)))
///     .condition_with_payload("covers_amount", |order: &Order, p: &Payment| p.amount >= order.total)
///     .condition("unpaid", |order: &Order| order.paid == 0);
/// assert!(registry.has_task("record_payment"));
/// assert!(registry.has_condition("covers_amount"));
/// ```
pub struct Registry<D> {
    pub(crate) tasks: HashMap<String, TaskFn<D>>,
    pub(crate) conditions: HashMap<String, ConditionFn<D>>,
    pub(crate) items: HashMap<String, ItemsFn<D>>,
    pub(crate) values: HashMap<String, ValueFn<D>>,
    pub(crate) assigns: HashMap<String, AssignFn<D>>,
    pub(crate) outcomes: HashMap<String, OutcomeFn>,
}

impl<D> Default for Registry<D> {
    fn default() -> Self {
        Self {
            tasks: HashMap::new(),
            conditions: HashMap::new(),
            items: HashMap::new(),
            values: HashMap::new(),
            assigns: HashMap::new(),
            outcomes: HashMap::new(),
        }
    }
}

impl<D> fmt::Debug for Registry<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut tasks: Vec<&String> = self.tasks.keys().collect();
        tasks.sort();
        let mut conditions: Vec<&String> = self.conditions.keys().collect();
        conditions.sort();
        let mut items: Vec<&String> = self.items.keys().collect();
        items.sort();
        let mut values: Vec<&String> = self.values.keys().collect();
        values.sort();
        let mut assigns: Vec<&String> = self.assigns.keys().collect();
        assigns.sort();
        let mut outcomes: Vec<&String> = self.outcomes.keys().collect();
        outcomes.sort();
        f.debug_struct("Registry")
            .field("tasks", &tasks)
            .field("conditions", &conditions)
            .field("items", &items)
            .field("values", &values)
            .field("assigns", &assigns)
            .field("outcomes", &outcomes)
            .finish()
    }
}

impl<D: Send + Sync + 'static> Registry<D> {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers the async fn `task` under `name`: a task node, a state's entry or exit, or a
    /// transition's action. A later registration under the same name replaces it.
    #[must_use]
    pub fn task<F>(mut self, name: impl Into<String>, task: F) -> Self
    where
        F: for<'a> Fn(&'a mut TaskContext<D>) -> BoxFuture<'a, TaskResult> + Send + Sync + 'static,
    {
        self.tasks.insert(name.into(), Arc::new(task));
        self
    }

    /// Registers a condition over the data under `name`.
    #[must_use]
    pub fn condition<F>(mut self, name: impl Into<String>, condition: F) -> Self
    where
        F: Fn(&D) -> bool + Send + Sync + 'static,
    {
        self.conditions.insert(
            name.into(),
            Arc::new(move |data, _payload| Ok(condition(data))),
        );
        self
    }

    /// Registers a condition over the data and the typed payload of the stimulus that fired the
    /// transition's trigger. A payload that does not decode into `P` is an error naming the
    /// condition and the type, never a panic; when a stimulus resuming the trigger brought
    /// it, the stimulus is rejected for the instance instead (RT-22, as for an outcome
    /// mapping).
    #[must_use]
    pub fn condition_with_payload<P, F>(mut self, name: impl Into<String>, condition: F) -> Self
    where
        P: DeserializeOwned + 'static,
        F: Fn(&D, &P) -> bool + Send + Sync + 'static,
    {
        let name = name.into();
        let label = name.clone();
        self.conditions.insert(
            name,
            Arc::new(move |data, payload| {
                let payload = payload.cloned().unwrap_or(Value::Null);
                let typed: P = serde_json::from_value(payload).map_err(|e| {
                    // ST-20: a neutral description, no Rust type path.
                    let type_name = crate::base::neutral_type_name::<P>();
                    TaskError::payload_decode(
                        &type_name,
                        format!(
                            "condition `{label}` cannot read its payload as `{type_name}`: {e}"
                        ),
                    )
                })?;
                Ok(condition(data, &typed))
            }),
        );
        self
    }

    /// Registers an items fn under `name`: the list a `for_each` or `parallel_for_each` loops
    /// over (ACT-16, ACT-17). It is evaluated once when the loop starts and the list is
    /// persisted as a snapshot of JSON values; each body receives its item as its input
    /// ([`TaskContext::input`]) and the variables `item` and `index`
    /// ([`TaskContext::variable`]). An item that does not serialize is a permanent error.
    ///
    /// ```
    /// # use workflow_runtime::Registry;
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Order { lines: Vec<u32> }
    /// let registry = Registry::<Order>::new().items("lines", |o: &Order| o.lines.clone());
    /// assert!(registry.has_items("lines"));
    /// ```
    #[must_use]
    pub fn items<T, F>(mut self, name: impl Into<String>, items: F) -> Self
    where
        T: Serialize,
        F: Fn(&D) -> Vec<T> + Send + Sync + 'static,
    {
        let name = name.into();
        let label = name.clone();
        self.items.insert(
            name,
            Arc::new(move |data| {
                items(data)
                    .iter()
                    .map(|item| {
                        serde_json::to_value(item).map_err(|e| {
                            TaskError::permanent(format!(
                                "items fn `{label}` returned an item that does not serialize: {e}"
                            ))
                        })
                    })
                    .collect()
            }),
        );
        self
    }

    /// Registers a value fn under `name`: a value computed from the data (ACT-10) for a
    /// `set_variable` (ACT-28), a `finish` output (ACT-25) or a `correlate` key (ACT-27, which
    /// needs a non-empty string). A value that does not serialize is a permanent error.
    ///
    /// ```
    /// # use workflow_runtime::Registry;
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Order { id: String, total: u64 }
    /// let registry = Registry::<Order>::new()
    ///     .value("order_key", |o: &Order| o.id.clone())
    ///     .value("total", |o: &Order| o.total);
    /// assert!(registry.has_value("total"));
    /// ```
    #[must_use]
    pub fn value<T, F>(mut self, name: impl Into<String>, value: F) -> Self
    where
        T: Serialize,
        F: Fn(&D) -> T + Send + Sync + 'static,
    {
        let name = name.into();
        let label = name.clone();
        self.values.insert(
            name,
            Arc::new(move |data| {
                serde_json::to_value(value(data)).map_err(|e| {
                    TaskError::permanent(format!(
                        "value fn `{label}` returned a value that does not serialize: {e}"
                    ))
                })
            }),
        );
        self
    }

    /// Registers an assign fn under `name`: it folds a typed value into the data, e.g. a
    /// SubWorkflow's child output (ACT-24). A value that does not decode into `T` is a
    /// permanent error naming the fn and the type.
    ///
    /// ```
    /// # use workflow_runtime::Registry;
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Order { shipped: bool }
    /// #[derive(serde::Deserialize)]
    /// struct Shipping { done: bool }
    /// let registry = Registry::<Order>::new()
    ///     .assign("take_shipping", |o: &mut Order, s: Shipping| o.shipped = s.done);
    /// assert!(registry.has_assign("take_shipping"));
    /// ```
    #[must_use]
    pub fn assign<T, F>(mut self, name: impl Into<String>, assign: F) -> Self
    where
        T: DeserializeOwned + 'static,
        F: Fn(&mut D, T) + Send + Sync + 'static,
    {
        let name = name.into();
        let label = name.clone();
        self.assigns.insert(
            name,
            Arc::new(move |data, value| {
                let typed: T = serde_json::from_value(value.clone()).map_err(|e| {
                    TaskError::permanent(format!(
                        "assign fn `{label}` cannot read its value as `{}`: {e}",
                        crate::base::neutral_type_name::<T>()
                    ))
                })?;
                assign(data, typed);
                Ok(())
            }),
        );
        self
    }

    /// Registers the outcome mapping of the payload type `P` under `name`, the `payload` name
    /// of the events that use it (ACT-19): when such an event declares its ports, its payload
    /// is decoded into `P` and completes the event with [`ChooseOutcome::outcome`]. A payload
    /// that resumes the event and does not decode into `P` rejects the stimulus for that
    /// instance (RT-22): nothing is committed, the stimulus is dead-lettered `Rejected` and
    /// the send reports [`Rejection::PayloadDecode`](crate::Rejection). `workflow!`
    /// registers it for every event with declared ports, under the type as written.
    ///
    /// ```
    /// # use workflow_runtime::{ChooseOutcome, Registry};
    /// # #[derive(serde::Serialize, serde::Deserialize)]
    /// # struct Expense { amount: u64 }
    /// #[derive(serde::Deserialize)]
    /// struct Decision { approved: bool }
    /// impl ChooseOutcome for Decision {
    ///     fn outcome(&self) -> &str {
    ///         if self.approved { "approved" } else { "rejected" }
    ///     }
    /// }
    /// let registry = Registry::<Expense>::new().outcome::<Decision>("Decision");
    /// assert!(registry.has_outcome("Decision"));
    /// ```
    #[must_use]
    pub fn outcome<P>(mut self, name: impl Into<String>) -> Self
    where
        P: ChooseOutcome + DeserializeOwned + 'static,
    {
        self.outcomes.insert(
            name.into(),
            Arc::new(|payload| {
                let typed: P = serde_json::from_value(payload.clone()).map_err(|e| {
                    // ST-20: the registered payload name, no Rust type path.
                    let type_name = crate::base::neutral_type_name::<P>();
                    TaskError::payload_decode(
                        &type_name,
                        format!("the payload does not decode into `{type_name}`: {e}"),
                    )
                })?;
                Ok(typed.outcome().to_owned())
            }),
        );
        self
    }

    /// Whether an outcome mapping is registered under `name`.
    pub fn has_outcome(&self, name: &str) -> bool {
        self.outcomes.contains_key(name)
    }

    /// Whether an assign fn is registered under `name`.
    pub fn has_assign(&self, name: &str) -> bool {
        self.assigns.contains_key(name)
    }

    /// Whether an items fn is registered under `name`.
    pub fn has_items(&self, name: &str) -> bool {
        self.items.contains_key(name)
    }

    /// Whether a value fn is registered under `name`.
    pub fn has_value(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// Whether a task is registered under `name`.
    pub fn has_task(&self, name: &str) -> bool {
        self.tasks.contains_key(name)
    }

    /// Whether a condition is registered under `name`.
    pub fn has_condition(&self, name: &str) -> bool {
        self.conditions.contains_key(name)
    }
}

/// The fingerprint of a `'static` definition as a `'static` string, computed once per
/// definition (for [`crate::Workflow::version`]'s default).
pub(crate) fn leak_version(definition: &'static Definition) -> &'static str {
    static CACHE: OnceLock<Mutex<HashMap<usize, &'static str>>> = OnceLock::new();
    let key = std::ptr::from_ref(definition) as usize;
    let cache = CACHE.get_or_init(Default::default);
    let mut cache = match cache.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    cache
        .entry(key)
        .or_insert_with(|| Box::leak(definition.fingerprint().into_boxed_str()))
}
