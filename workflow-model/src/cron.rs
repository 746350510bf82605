//! Cron expressions (TM-12): parsing, validation (TM-V1) and the next occurrence, in UTC or in
//! a [`Zone`] (TM-16 to TM-18).
//!
//! Five fields (minute, hour, day of month, month, day of week), or six with a leading seconds
//! field. Each field takes `*`, lists (`1,15`), ranges (`MON-FRI`), steps (`*/15`, `10-50/10`)
//! and, for months and weekdays, names in any case (`JAN`, `mon`). Day of week runs 0-7, where
//! 0 and 7 are Sunday. When both day fields are restricted, a day matches if either matches.
//! `L`, `W`, `#` and `?` are rejected.
//!
//! [`Schedule::next_after`] computes in UTC and [`Schedule::next_after_in`] in a [`Zone`]:
//! `UTC`, a fixed offset such as `+02:00`, or an IANA name such as `Europe/Berlin`, looked up
//! in the time zone database bundled with the library (no system files are read). A local time
//! skipped by a spring-forward fires at the first valid instant after it (TM-17); a local time
//! repeated by a fall-back fires once, at its first instant (TM-18).
//!
//! ```
//! use workflow_model::cron::{Schedule, Zone};
//!
//! let every_quarter = Schedule::parse("*/15 * * * *").unwrap();
//! // 2026-01-01T10:07:00Z -> 10:15:00Z
//! assert_eq!(every_quarter.next_after(1_767_262_020), Some(1_767_262_500));
//! assert_eq!(
//!     Schedule::parse("0 25 * * *").unwrap_err().to_string(),
//!     "invalid cron expression `0 25 * * *`; hour `25` is out of range 0-23"
//! );
//! // 09:00 in Berlin on 2026-01-01 is 08:00 UTC.
//! let berlin = Zone::parse("Europe/Berlin").unwrap();
//! let nine = Schedule::parse("0 9 * * *").unwrap();
//! assert_eq!(nine.next_after_in(1_767_225_600, &berlin), Some(1_767_225_600 + 8 * 3600));
//! ```

use std::fmt;
use std::sync::OnceLock;

use jiff::Timestamp;
use jiff::tz::{AmbiguousOffset, Offset, TimeZone};

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    seconds: u64,
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    day_of_month_restricted: bool,
    day_of_week_restricted: bool,
}

/// Why a cron expression does not parse (TM-V1). Its `Display` is the validator's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronError {
    /// The whole expression.
    pub expression: String,
    /// What is wrong, e.g. ``hour `25` is out of range 0-23``.
    pub reason: String,
}

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid cron expression `{}`; {}",
            self.expression, self.reason
        )
    }
}

impl std::error::Error for CronError {}

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const SECOND: Field = Field {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
};
const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
};
const DAY_OF_WEEK: Field = Field {
    name: "day of week",
    min: 0,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
};

impl Field {
    fn value(&self, text: &str) -> Result<u32, String> {
        let upper = text.to_ascii_uppercase();
        if let Some(i) = self.names.iter().position(|n| *n == upper) {
            let base = if self.min == 1 { 1 } else { 0 };
            return Ok(u32::try_from(i).unwrap_or(0) + base);
        }
        if let Some(c) = upper.chars().find(|c| matches!(c, 'L' | 'W')) {
            return Err(format!("`{c}` in {} `{text}` is not supported", self.name));
        }
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("{} `{text}` is not a number", self.name));
        }
        match text.parse::<u32>() {
            Ok(v) if (self.min..=self.max).contains(&v) => Ok(v),
            _ => Err(format!(
                "{} `{text}` is out of range {}-{}",
                self.name, self.min, self.max
            )),
        }
    }

    /// The bit set of `text`, and whether it was a bare `*`.
    fn parse(&self, text: &str) -> Result<(u64, bool), String> {
        if let Some(c) = text.chars().find(|c| matches!(c, '#' | '?')) {
            return Err(format!("`{c}` in {} `{text}` is not supported", self.name));
        }
        let mut bits = 0u64;
        for part in text.split(',') {
            let (range, step) = match part.split_once('/') {
                Some((range, step)) => {
                    let step = match step.parse::<u32>() {
                        Ok(s) if s > 0 => s,
                        _ => {
                            return Err(format!(
                                "step `{step}` in {} `{part}` must be a positive number",
                                self.name
                            ));
                        }
                    };
                    (range, Some(step))
                }
                None => (part, None),
            };
            let (lo, hi) = if range == "*" {
                (self.min, self.max)
            } else if let Some((a, b)) = range.split_once('-') {
                let (a, b) = (self.value(a)?, self.value(b)?);
                if a > b {
                    return Err(format!("{} range `{range}` runs backwards", self.name));
                }
                (a, b)
            } else {
                let v = self.value(range)?;
                (v, if step.is_some() { self.max } else { v })
            };
            let mut v = lo;
            while v <= hi {
                bits |= 1 << v;
                v += step.unwrap_or(1);
            }
        }
        Ok((bits, text == "*"))
    }
}

impl Schedule {
    /// Parses a 5- or 6-field cron expression (TM-12).
    ///
    /// # Errors
    ///
    /// A [`CronError`] naming the expression and what is wrong with it (TM-V1).
    pub fn parse(expression: &str) -> Result<Self, CronError> {
        let fail = |reason: String| CronError {
            expression: expression.to_owned(),
            reason,
        };
        let fields: Vec<&str> = expression.split_whitespace().collect();
        let (seconds, minute, hour, day_of_month, month, day_of_week) = match fields.as_slice() {
            [mi, h, dom, mo, dow] => ("0", *mi, *h, *dom, *mo, *dow),
            [s, mi, h, dom, mo, dow] => (*s, *mi, *h, *dom, *mo, *dow),
            other => {
                return Err(fail(format!(
                    "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with \
                     leading seconds, found {}",
                    other.len()
                )));
            }
        };
        let (seconds, _) = SECOND.parse(seconds).map_err(fail)?;
        let (minutes, _) = MINUTE.parse(minute).map_err(fail)?;
        let (hours, _) = HOUR.parse(hour).map_err(fail)?;
        let (days_of_month, dom_star) = DAY_OF_MONTH.parse(day_of_month).map_err(fail)?;
        let (months, _) = MONTH.parse(month).map_err(fail)?;
        let (mut days_of_week, dow_star) = DAY_OF_WEEK.parse(day_of_week).map_err(fail)?;
        if days_of_week & (1 << 7) != 0 {
            days_of_week |= 1;
        }
        Ok(Schedule {
            seconds,
            minutes,
            hours,
            days_of_month,
            months,
            days_of_week: days_of_week & 0x7f,
            day_of_month_restricted: !dom_star,
            day_of_week_restricted: !dow_star,
        })
    }

    fn day_matches(&self, day: u32, weekday: u32) -> bool {
        let dom = self.days_of_month & (1 << day) != 0;
        let dow = self.days_of_week & (1 << weekday) != 0;
        match (self.day_of_month_restricted, self.day_of_week_restricted) {
            (true, true) => dom || dow,
            (true, false) => dom,
            (false, true) => dow,
            (false, false) => true,
        }
    }

    /// The first occurrence strictly after `unix_seconds`, in UTC, or `None` if there is none
    /// within 5 years (e.g. `0 0 30 FEB *`).
    pub fn next_after(&self, unix_seconds: u64) -> Option<u64> {
        let start = unix_seconds.checked_add(1)?;
        let first_day = start / 86_400;
        let mut second_of_day = start % 86_400;
        for day in first_day..first_day + 366 * 5 {
            let (_, month, dom) = civil_from_days(day);
            let weekday = u32::try_from((day + 4) % 7).unwrap_or(0);
            if self.months & (1 << month) != 0
                && self.day_matches(dom, weekday)
                && let Some(s) = self.first_time_from(second_of_day)
            {
                return Some(day * 86_400 + s);
            }
            second_of_day = 0;
        }
        None
    }

    /// The first occurrence strictly after `unix_seconds` in a zone at a fixed offset from UTC
    /// (`offset_seconds` east of UTC, see [`fixed_offset_seconds`]); UTC instants in and out.
    pub fn next_after_with_offset(&self, unix_seconds: u64, offset_seconds: i32) -> Option<u64> {
        let offset = i64::from(offset_seconds);
        let local = i64::try_from(unix_seconds).ok()?.checked_add(offset)?;
        let next = self.next_after(u64::try_from(local).ok()?)?;
        u64::try_from(i64::try_from(next).ok()?.checked_sub(offset)?).ok()
    }

    /// The first occurrence strictly after `unix_seconds` in `zone`; UTC instants in and out.
    /// The expression is matched against local wall-clock time: a local time skipped by a
    /// spring-forward fires at the first valid instant after it (TM-17), and a local time
    /// repeated by a fall-back fires once, at its first instant (TM-18). `None` if there is no
    /// occurrence within 5 years.
    ///
    /// # Examples
    ///
    /// ```
    /// use workflow_model::cron::{Schedule, Zone};
    ///
    /// let berlin = Zone::parse("Europe/Berlin").unwrap();
    /// let half_past_two = Schedule::parse("30 2 * * *").unwrap();
    /// // 2026-03-29: Berlin skips 02:00-03:00 local; the occurrence fires at 03:00 CEST.
    /// let saturday_noon = 1_774_699_200; // 2026-03-28T12:00:00Z
    /// assert_eq!(half_past_two.next_after_in(saturday_noon, &berlin), Some(1_774_746_000));
    /// ```
    pub fn next_after_in(&self, unix_seconds: u64, zone: &Zone) -> Option<u64> {
        let after = i64::try_from(unix_seconds).ok()?;
        let mut local = u64::try_from(zone.local_seconds(after)?).ok()?;
        // A candidate's instant can be at or before `after` only in a fall-back's repeated
        // hour (or at a gap's transition); a bounded walk steps over those.
        for _ in 0..100_000 {
            let candidate = self.next_after(local)?;
            let instant = zone.instant_of_local(i64::try_from(candidate).ok()?)?;
            if instant > after {
                return u64::try_from(instant).ok();
            }
            local = candidate;
        }
        None
    }

    fn first_time_from(&self, from: u64) -> Option<u64> {
        let (h0, m0, s0) = (from / 3600, from / 60 % 60, from % 60);
        for h in h0..24 {
            if self.hours & (1 << h) == 0 {
                continue;
            }
            let m_start = if h == h0 { m0 } else { 0 };
            for m in m_start..60 {
                if self.minutes & (1 << m) == 0 {
                    continue;
                }
                let s_start = if h == h0 && m == m0 { s0 } else { 0 };
                if let Some(s) = (s_start..60).find(|s| self.seconds & (1 << s) != 0) {
                    return Some(h * 3600 + m * 60 + s);
                }
            }
        }
        None
    }
}

/// The zone names accepted besides IANA `Area/Location` names and fixed offsets (TM-V2).
pub const KNOWN_TIME_ZONES: &[&str] = TIME_ZONE_EXTRA;

/// TM-V2: `UTC`, a fixed offset `+HH:MM` / `-HH:MM` (up to 14 hours), or an IANA name in the
/// bundled database (TM-16).
pub fn is_known_time_zone(zone: &str) -> bool {
    Zone::parse(zone).is_ok()
}

fn is_fixed_offset(zone: &str) -> bool {
    if zone == "UTC" {
        return true;
    }
    let bytes = zone.as_bytes();
    if bytes.len() != 6
        || !matches!(bytes.first(), Some(b'+' | b'-'))
        || bytes.get(3) != Some(&b':')
    {
        return false;
    }
    let digits = |a: usize, b: usize| -> Option<u32> {
        zone.get(a..b)
            .filter(|s| s.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
    };
    matches!((digits(1, 3), digits(4, 6)), (Some(h), Some(m)) if m < 60 && (h < 14 || (h == 14 && m == 0)))
}

/// The offset east of UTC in seconds of `UTC` or a fixed offset (TM-V2): `UTC` is 0,
/// `+02:00` is 7200, `-05:30` is -19800; `None` for anything else, IANA names included.
pub fn fixed_offset_seconds(zone: &str) -> Option<i32> {
    if zone == "UTC" {
        return Some(0);
    }
    if !is_fixed_offset(zone) {
        return None;
    }
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let hours: i32 = zone.get(1..3)?.parse().ok()?;
    let minutes: i32 = zone.get(4..6)?.parse().ok()?;
    Some(sign * (hours * 3600 + minutes * 60))
}

/// A time zone a schedule or a local instant is computed in (TM-16): `UTC`, a fixed offset
/// (`+02:00`, `-05:30`) or an IANA name (`Europe/Berlin`) from the bundled time zone database.
///
/// # Examples
///
/// ```
/// use workflow_model::cron::Zone;
///
/// assert_eq!(Zone::parse("America/New_York").unwrap().name(), "America/New_York");
/// assert_eq!(
///     Zone::parse("Europe/Pariss").unwrap_err().to_string(),
///     "unknown time zone `Europe/Pariss`; did you mean `Europe/Paris`?"
/// );
/// ```
#[derive(Debug, Clone)]
pub struct Zone {
    name: String,
    tz: TimeZone,
}

impl PartialEq for Zone {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

/// An unknown time zone (TM-V2). Its `Display` is the validator's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneError {
    /// The zone as written.
    pub zone: String,
    /// The closest known name, when one is close.
    pub suggestion: Option<String>,
}

impl fmt::Display for ZoneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.suggestion {
            Some(found) => write!(
                f,
                "unknown time zone `{}`; did you mean `{found}`?",
                self.zone
            ),
            None => write!(
                f,
                "unknown time zone `{}`; expected `UTC`, a fixed offset such as `+02:00` or an \
                 IANA name such as `Europe/Berlin`",
                self.zone
            ),
        }
    }
}

impl std::error::Error for ZoneError {}

impl Zone {
    /// UTC.
    pub fn utc() -> Self {
        Zone {
            name: "UTC".to_owned(),
            tz: TimeZone::UTC,
        }
    }

    /// The zone named `name`: `UTC`, a fixed offset `+HH:MM` / `-HH:MM` (up to 14 hours), or
    /// an IANA name in the bundled database (TM-16).
    ///
    /// # Errors
    ///
    /// A [`ZoneError`] naming the zone, with the closest known name when one is close (TM-V2).
    pub fn parse(name: &str) -> Result<Self, ZoneError> {
        if let Some(seconds) = fixed_offset_seconds(name) {
            let offset = Offset::from_seconds(seconds).map_err(|_| unknown_zone(name))?;
            return Ok(Zone {
                name: name.to_owned(),
                tz: TimeZone::fixed(offset),
            });
        }
        // Only names as the database spells them: a zone is part of a definition's
        // fingerprint, so `europe/berlin` is a misspelling, not a second name.
        if time_zone_names()
            .binary_search_by(|n| n.as_str().cmp(name))
            .is_err()
        {
            return Err(unknown_zone(name));
        }
        let tz = TimeZone::get(name).map_err(|_| unknown_zone(name))?;
        Ok(Zone {
            name: name.to_owned(),
            tz,
        })
    }

    /// The name as written in the definition.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The offset east of UTC in seconds, for `UTC` and fixed offsets; `None` for IANA zones.
    pub fn fixed_offset_seconds(&self) -> Option<i32> {
        fixed_offset_seconds(&self.name)
    }

    /// The local wall-clock time at `unix_seconds`, as seconds since 1970-01-01T00:00:00 local.
    pub fn local_seconds(&self, unix_seconds: i64) -> Option<i64> {
        let at = Timestamp::from_second(unix_seconds).ok()?;
        Some(unix_seconds + i64::from(self.tz.to_offset(at).seconds()))
    }

    /// The instant (Unix seconds) of a local wall-clock time given as seconds since
    /// 1970-01-01T00:00:00 local: a time skipped by a spring-forward resolves to the first
    /// valid instant after it, the transition itself (TM-17); a time repeated by a fall-back
    /// resolves to its first instant (TM-18).
    pub fn instant_of_local(&self, local_seconds: i64) -> Option<i64> {
        let civil = TimeZone::UTC.to_datetime(Timestamp::from_second(local_seconds).ok()?);
        match self.tz.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => {
                local_seconds.checked_sub(i64::from(offset.seconds()))
            }
            // The earlier instant of the two: the local time with the offset before the change.
            AmbiguousOffset::Fold { before, .. } => {
                local_seconds.checked_sub(i64::from(before.seconds()))
            }
            AmbiguousOffset::Gap { after, .. } => {
                // With the offset after the gap the local time lies before the transition; the
                // first transition after that is where the local clock jumps past it.
                let lower = local_seconds.checked_sub(i64::from(after.seconds()))?;
                let from = Timestamp::from_second(lower).ok()?;
                let transition = self.tz.following(from).next()?;
                Some(transition.timestamp().as_second())
            }
        }
    }

    /// The instant (Unix milliseconds) of an RFC 3339 local date and time without an offset
    /// (`2026-03-29T02:30:00`) in this zone, by [`Zone::instant_of_local`]'s rules; `None` if
    /// the text is not such a date and time.
    pub fn instant_of_local_text(&self, text: &str) -> Option<i64> {
        let civil: jiff::civil::DateTime = text.parse().ok()?;
        let local = TimeZone::UTC.to_timestamp(civil).ok()?;
        let millis = i64::from(local.subsec_millisecond());
        let seconds = self.instant_of_local(local.as_second())?;
        seconds.checked_mul(1000)?.checked_add(millis)
    }
}

/// Names accepted that are neither `Area/Location` IANA names nor fixed offsets.
const TIME_ZONE_EXTRA: &[&str] = &["UTC"];

fn unknown_zone(zone: &str) -> ZoneError {
    let names = time_zone_names();
    let suggestion = crate::diagnostics::suggest(
        zone,
        TIME_ZONE_EXTRA
            .iter()
            .copied()
            .chain(names.iter().map(String::as_str)),
    )
    .map(ToOwned::to_owned);
    ZoneError {
        zone: zone.to_owned(),
        suggestion,
    }
}

/// The IANA names of the bundled time zone database, sorted (TM-16).
pub fn time_zone_names() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: Vec<String> = jiff::tz::db()
            .available()
            .map(|n| n.as_str().to_owned())
            .collect();
        names.sort();
        names
    })
}

/// (year, month 1-12, day 1-31) of the day `days` after 1970-01-01 (Howard Hinnant's
/// algorithm).
fn civil_from_days(days: u64) -> (i64, u32, u32) {
    let z = i64::try_from(days).unwrap_or(0) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-01-01T00:00:00Z is a Thursday.
    const JAN1_2026: u64 = 1_767_225_600;

    fn next(expr: &str, after: u64) -> u64 {
        Schedule::parse(expr).unwrap().next_after(after).unwrap()
    }

    fn err(expr: &str) -> String {
        Schedule::parse(expr).unwrap_err().to_string()
    }

    #[test]
    fn every_quarter_hour_from_10_07() {
        let t = JAN1_2026 + 10 * 3600 + 7 * 60;
        let a = next("*/15 * * * *", t);
        assert_eq!(a, JAN1_2026 + 10 * 3600 + 15 * 60);
        let b = next("*/15 * * * *", a);
        assert_eq!(b, JAN1_2026 + 10 * 3600 + 30 * 60);
        assert_eq!(
            next("*/15 * * * *", JAN1_2026 + 10 * 3600 + 45 * 60),
            JAN1_2026 + 11 * 3600
        );
    }

    #[test]
    fn weekdays_at_nine_skip_the_weekend() {
        // Friday 2026-01-02 09:00 -> Monday 2026-01-05 09:00.
        let friday_nine = JAN1_2026 + 86_400 + 9 * 3600;
        assert_eq!(next("0 9 * * MON-FRI", friday_nine - 1), friday_nine);
        assert_eq!(
            next("0 9 * * mon-fri", friday_nine),
            JAN1_2026 + 4 * 86_400 + 9 * 3600
        );
    }

    #[test]
    fn sunday_is_0_and_7() {
        let sunday = JAN1_2026 + 3 * 86_400; // 2026-01-04
        assert_eq!(next("0 0 * * 7", JAN1_2026), sunday);
        assert_eq!(next("0 0 * * 0", JAN1_2026), sunday);
        assert_eq!(next("0 0 * * SUN", JAN1_2026), sunday);
    }

    #[test]
    fn either_day_field_matches_when_both_are_restricted() {
        // The 10th, or any Saturday (2026-01-03).
        assert_eq!(next("0 0 10 * SAT", JAN1_2026), JAN1_2026 + 2 * 86_400);
        // Only the 10th.
        assert_eq!(next("0 0 10 * *", JAN1_2026), JAN1_2026 + 9 * 86_400);
    }

    #[test]
    fn months_by_name_lists_and_leap_days() {
        // 2028-02-29T12:00:00Z
        assert_eq!(next("0 12 29 FEB *", JAN1_2026), 1_835_438_400);
        assert_eq!(next("0 0 1 jan,JUL *", JAN1_2026), 1_782_864_000); // 2026-07-01
        assert_eq!(
            Schedule::parse("0 0 30 FEB *")
                .unwrap()
                .next_after(JAN1_2026),
            None
        );
    }

    #[test]
    fn six_fields_have_leading_seconds() {
        assert_eq!(next("*/10 * * * * *", JAN1_2026), JAN1_2026 + 10);
        assert_eq!(next("30 0 0 * * *", JAN1_2026), JAN1_2026 + 30);
        assert_eq!(next("10-50/20 * * * *", JAN1_2026), JAN1_2026 + 600);
    }

    #[test]
    fn fixed_offsets_shift_local_time() {
        assert_eq!(fixed_offset_seconds("UTC"), Some(0));
        assert_eq!(fixed_offset_seconds("+02:00"), Some(7_200));
        assert_eq!(fixed_offset_seconds("-05:30"), Some(-19_800));
        assert_eq!(fixed_offset_seconds("Europe/Paris"), None);
        let nine = Schedule::parse("0 9 * * *").unwrap();
        // 09:00 at +02:00 is 07:00 UTC.
        assert_eq!(
            nine.next_after_with_offset(JAN1_2026, 7_200),
            Some(JAN1_2026 + 7 * 3600)
        );
        // 09:00 at -05:30 is 14:30 UTC.
        assert_eq!(
            nine.next_after_with_offset(JAN1_2026, -19_800),
            Some(JAN1_2026 + 14 * 3600 + 1800)
        );
    }

    #[test]
    fn errors_name_the_field_and_value() {
        assert_eq!(
            err("0 25 * * *"),
            "invalid cron expression `0 25 * * *`; hour `25` is out of range 0-23"
        );
        assert_eq!(
            err("0 9 * * MON-FRX"),
            "invalid cron expression `0 9 * * MON-FRX`; day of week `FRX` is not a number"
        );
        assert_eq!(
            err("0 0 L * *"),
            "invalid cron expression `0 0 L * *`; `L` in day of month `L` is not supported"
        );
        assert_eq!(
            err("0 0 * *"),
            "invalid cron expression `0 0 * *`; expected 5 fields (minute hour day-of-month month \
             day-of-week) or 6 with leading seconds, found 4"
        );
        assert_eq!(
            err("*/0 * * * *"),
            "invalid cron expression `*/0 * * * *`; step `0` in minute `*/0` must be a positive number"
        );
        assert_eq!(
            err("0 0 * 13 *"),
            "invalid cron expression `0 0 * 13 *`; month `13` is out of range 1-12"
        );
        assert_eq!(
            err("0 5-2 * * *"),
            "invalid cron expression `0 5-2 * * *`; hour range `5-2` runs backwards"
        );
    }

    /// Unix seconds of an RFC 3339 instant.
    fn at(text: &str) -> u64 {
        let ts: Timestamp = text.parse().unwrap();
        u64::try_from(ts.as_second()).unwrap()
    }

    /// The next `n` occurrences of `expr` in `zone` after `from`, as RFC 3339 UTC instants.
    fn series(expr: &str, zone: &str, from: &str, n: usize) -> Vec<String> {
        let schedule = Schedule::parse(expr).unwrap();
        let zone = Zone::parse(zone).unwrap();
        let mut t = at(from);
        let mut out = Vec::new();
        for _ in 0..n {
            t = schedule.next_after_in(t, &zone).unwrap();
            out.push(
                Timestamp::from_second(i64::try_from(t).unwrap())
                    .unwrap()
                    .to_string(),
            );
        }
        out
    }

    #[test]
    fn berlin_spring_forward_fires_a_skipped_time_at_the_transition_tm_17() {
        // 2026-03-29 02:00 CET becomes 03:00 CEST (01:00 UTC).
        assert_eq!(
            series("30 2 * * *", "Europe/Berlin", "2026-03-27T12:00:00Z", 3),
            [
                "2026-03-28T01:30:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-30T00:30:00Z"
            ]
        );
        // Hourly: 02:00 local does not exist; it and 03:00 fire once, at the transition.
        assert_eq!(
            series("0 * * * *", "Europe/Berlin", "2026-03-28T23:30:00Z", 3),
            [
                "2026-03-29T00:00:00Z",
                "2026-03-29T01:00:00Z",
                "2026-03-29T02:00:00Z"
            ]
        );
    }

    #[test]
    fn berlin_fall_back_fires_a_repeated_time_once_tm_18() {
        // 2026-10-25 03:00 CEST becomes 02:00 CET (01:00 UTC): 02:30 happens twice.
        assert_eq!(
            series("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00:00Z", 2),
            ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
        );
        // Hourly: 02:00 local fires at its first instant only, then 03:00 CET.
        assert_eq!(
            series("0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z", 2),
            ["2026-10-25T00:00:00Z", "2026-10-25T02:00:00Z"]
        );
        // From inside the repeated hour, its local times have already fired.
        assert_eq!(
            series("*/15 * * * *", "Europe/Berlin", "2026-10-25T01:10:00Z", 1),
            ["2026-10-25T02:00:00Z"]
        );
    }

    #[test]
    fn new_york_spring_forward_and_fall_back() {
        // 2026-03-08 02:00 EST becomes 03:00 EDT (07:00 UTC).
        assert_eq!(
            series("30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z", 2),
            ["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]
        );
        assert_eq!(
            series("0 * * * *", "America/New_York", "2026-03-08T06:30:00Z", 2),
            ["2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"]
        );
        // 2026-11-01 02:00 EDT becomes 01:00 EST (06:00 UTC): 01:30 happens twice.
        assert_eq!(
            series("30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z", 2),
            ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]
        );
        assert_eq!(
            series("0 * * * *", "America/New_York", "2026-11-01T04:30:00Z", 3),
            [
                "2026-11-01T05:00:00Z",
                "2026-11-01T07:00:00Z",
                "2026-11-01T08:00:00Z"
            ]
        );
    }

    #[test]
    fn weekdays_at_nine_in_berlin_follow_summer_time() {
        // Friday 09:00 CET, then Monday 09:00 CEST.
        assert_eq!(
            series(
                "0 9 * * MON-FRI",
                "Europe/Berlin",
                "2026-03-27T00:00:00Z",
                2
            ),
            ["2026-03-27T08:00:00Z", "2026-03-30T07:00:00Z"]
        );
    }

    #[test]
    fn local_instants_follow_the_same_rules() {
        let berlin = Zone::parse("Europe/Berlin").unwrap();
        let ms = |s: &str| i64::try_from(at(s)).unwrap() * 1000;
        assert_eq!(
            berlin.instant_of_local_text("2026-03-29T02:30:00"),
            Some(ms("2026-03-29T01:00:00Z"))
        );
        assert_eq!(
            berlin.instant_of_local_text("2026-10-25T02:30:00"),
            Some(ms("2026-10-25T00:30:00Z"))
        );
        assert_eq!(
            berlin.instant_of_local_text("2026-07-01T12:00:00.250"),
            Some(ms("2026-07-01T10:00:00Z") + 250)
        );
        assert_eq!(berlin.instant_of_local_text("tomorrow"), None);
    }

    #[test]
    fn zones_are_checked_against_the_bundled_database() {
        assert!(is_known_time_zone("Europe/Berlin"));
        assert!(is_known_time_zone("UTC"));
        assert!(is_known_time_zone("+02:00"));
        assert!(!is_known_time_zone("europe/berlin"));
        assert_eq!(
            Zone::parse("America/New_Yrok")
                .unwrap_err()
                .suggestion
                .as_deref(),
            Some("America/New_York")
        );
        assert_eq!(
            Zone::parse("+02:00").unwrap().fixed_offset_seconds(),
            Some(7200)
        );
        assert_eq!(
            Zone::parse("Asia/Tokyo").unwrap().fixed_offset_seconds(),
            None
        );
        assert!(time_zone_names().len() > 300);
    }
}
