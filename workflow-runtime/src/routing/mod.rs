//! Routing of stimuli: names, keys and hashes (RT-1 to RT-8), the trigger index and
//! activation (RT-9 to RT-16), delivery by [`Runtime::send`](crate::Runtime::send) (RT-17 to
//! RT-24), the bookmark queue and its worker (RT-25 to RT-31) and dead letters.
//!
//! The hash is the SHA-256 of a frozen canonical encoding of `(name, key[, scope])`, so a
//! waiting Event bookmark, a trigger row and a send of the same event name and key hash alike
//! (ACT-3, RT-6): the same function serves senders, bookmark creation and trigger indexing.
//!
//! # Identity (RT-1, RT-8)
//!
//! A stimulus is a `name`, an optional `key` and a `payload`. Only the name and the key (and,
//! for a bookmark meant for one activity instance, its scope) are hashed; the payload is data,
//! delivered as JSON and decoded by the waiting activity. Each send gets a `stimulus_id`: a
//! ULID, or, with an idempotency key, an id derived from the key so a retry has the same one.
//!
//! # Names (RT-2)
//!
//! 1 to 256 bytes of UTF-8 without control characters, compared byte for byte (no case
//! folding, no normalisation). Names beginning with `wf.` are reserved for built-in stimuli.
//!
//! # Key values (RT-3)
//!
//! A key is any `Serialize` value, taken through its JSON form: `null` or absent is *unit*;
//! booleans; integers (any width, up to `i128`: `5u8`, `5i64` and JSON `5` are the same key);
//! strings (and whatever serializes as one: UUIDs, ULIDs, dates, unit enum variants);
//! sequences (vectors, tuples, arrays); maps with string keys (maps, structs; newtype structs
//! are transparent; `Some(x)` is `x`). Floats are rejected with the path of the offending part
//! (`$.lines[2].price`): their text is not stable enough to route on.
//!
//! # Canonical encoding (RT-4), version `wf-stimulus/1`
//!
//! Each value is a tag byte and a body; lengths and counts are `u32` big-endian:
//!
//! | value | bytes |
//! |---|---|
//! | unit | `00` |
//! | bool | `01`, then `00` or `01` |
//! | integer | `02`, then the `i128` two's complement, 16 bytes big-endian |
//! | string | `03`, byte length, UTF-8 bytes |
//! | sequence | `05`, element count, each element |
//! | map | `06`, entry count, entries by ascending UTF-8 bytes of the key: key as a string, value |
//!
//! The hashed message is `wf-stimulus/1`, a `00` byte, the name as a string, the key as a
//! value (unit when absent), then `00` when unscoped or `01` followed by the instance id and
//! the context id as strings (RT-7). The hash (RT-5) is the SHA-256 of that message as 64
//! lowercase hex digits; the vectors of RT-5 are a test of this module. The
//! encoding depends on no serializer formatting, map order, endianness or type name (RT-6); a
//! change would need a new prefix and a store migration, never a silent edit.

mod stimulus;

pub use crate::identity::{
    RoutingError, check_correlation_id, check_name, key_digest, stimulus_hash,
};
pub use stimulus::{
    AddressedInstance, Debounced, Declined, MAX_DEBOUNCE, NotAwaited, Refusal, Rejection,
    SendError, SendReport, Stimulus,
};
pub(crate) use stimulus::{
    BOOKMARK_PAGE, DEFAULT_QUEUE_TTL, MAX_PAYLOAD_BYTES, Targets, child_result_item, to_micros,
};
