//! The runtime's router: delivery by [`Runtime::send`](crate::Runtime::send) (RT-14 to
//! RT-24), the trigger index and activation (RT-9 to RT-16), the bookmark queue and its worker
//! (RT-25 to RT-31) and dead letters. What they exchange with callers (the stimulus, reports,
//! errors, the hash) is the public [`crate::routing`] module, one layer down.

mod dead_letters;
mod delivery;
pub(crate) mod queue;
mod triggers;
