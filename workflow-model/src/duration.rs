//! A duration in milliseconds as the definitions write it: `30m`, `48h`, `1500ms`. Shared by
//! the diagrams and the validator's messages.

/// `48h`, `5m`, `30s`, `1500ms`, `2d`: the largest unit that divides it.
pub(crate) fn duration(ms: u64) -> String {
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn the_largest_unit_that_divides() {
        assert_eq!(duration(1_500), "1500ms");
        assert_eq!(duration(300_000), "5m");
        assert_eq!(duration(30 * 60_000), "30m");
        assert_eq!(duration(48 * 3_600_000), "2d");
        assert_eq!(duration(90_000), "90s");
        assert_eq!(duration(0), "0ms");
    }
}
