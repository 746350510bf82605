//! Writing HTML: every text and attribute escaped, the page shell with its embedded style
//! sheet, and times and durations as people read them.

use std::fmt::Write as _;

use workflow_runtime::store::Micros;

/// The console's style sheet, embedded in the binary (no CDN, no web font).
pub(crate) const STYLE: &str = include_str!("assets/console.css");

/// `text` with `&`, `<`, `>`, `"` and `'` escaped: safe in element content and in quoted
/// attribute values.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `text` percent-encoded for a URL path segment or a query value.
pub(crate) fn url_part(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The console's first page under `base`: `/` at the root, `base` itself when nested (a
/// nested router does not answer `base/`).
pub(crate) fn home(base: &str) -> String {
    if base.is_empty() {
        "/".to_owned()
    } else {
        base.to_owned()
    }
}

/// Which entry of the navigation a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Section {
    Instances,
    Definitions,
    DeadLetters,
    Queues,
    None,
}

/// A whole page: `title` (escaped here) and `body` (already HTML).
pub(crate) fn page(base: &str, section: Section, title: &str, body: &str) -> String {
    let nav = [
        (Section::Instances, home(base), "Instances"),
        (
            Section::Definitions,
            format!("{base}/definitions"),
            "Definitions",
        ),
        (
            Section::DeadLetters,
            format!("{base}/dead-letters"),
            "Dead letters",
        ),
        (Section::Queues, format!("{base}/queues"), "Queues"),
    ];
    let mut links = String::new();
    for (entry, path, label) in nav {
        let current = if entry == section {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(links, "<a href=\"{}\"{current}>{label}</a>", escape(&path));
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · workflow console</title><style>{STYLE}</style></head>\
         <body><header><a class=\"brand\" href=\"{}\">workflow console</a><nav>{links}</nav>\
         </header><main>{body}</main></body></html>\n",
        escape(title),
        escape(&home(base)),
    )
}

/// A message page (a 400's or a 404's body).
pub(crate) fn message_page(base: &str, title: &str, message: &str) -> String {
    let body = format!(
        "<h1>{}</h1><p class=\"message\">{}</p><p><a href=\"{}\">Back to the instances</a></p>",
        escape(title),
        escape(message),
        escape(&home(base))
    );
    page(base, Section::None, title, &body)
}

/// `2026-12-06 00:43:32 UTC`; `-` for 0.
pub(crate) fn instant(at: Micros) -> String {
    if at == 0 {
        return "-".to_owned();
    }
    let secs = at.div_euclid(1_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The date of a day number since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// The day number since 1970-01-01 of a date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM` (what a browser's date-time field sends) or
/// `YYYY-MM-DDTHH:MM:SS` (a space for the `T` too), in UTC, to microseconds.
pub(crate) fn parse_instant(text: &str) -> Option<Micros> {
    let text = text.trim().trim_end_matches('Z');
    let (date, time) = match text.split_once(['T', ' ']) {
        Some((date, time)) => (date, time),
        None => (text, "00:00"),
    };
    let mut date_parts = date.splitn(3, '-');
    let y: i64 = number(date_parts.next()?, 4)?;
    let m: i64 = number(date_parts.next()?, 2)?;
    let d: i64 = number(date_parts.next()?, 2)?;
    let mut time_parts = time.splitn(3, ':');
    let hh: i64 = number(time_parts.next()?, 2)?;
    let mm: i64 = number(time_parts.next()?, 2)?;
    let ss: i64 = match time_parts.next() {
        Some(s) => number(s, 2)?,
        None => 0,
    };
    let valid = (1..=12).contains(&m)
        && (1..=days_in_month(y, m)).contains(&d)
        && hh < 24
        && mm < 60
        && ss < 60;
    if !valid {
        return None;
    }
    let secs = days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60 + ss;
    secs.checked_mul(1_000_000)
}

fn number(text: &str, digits: usize) -> Option<i64> {
    (text.len() == digits && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `3m 20s ago`, `in 2h`: `at` relative to `now`.
pub(crate) fn relative(at: Micros, now: Micros) -> String {
    if at == 0 {
        return "-".to_owned();
    }
    if at <= now {
        format!("{} ago", duration(now - at))
    } else {
        format!("in {}", duration(at - now))
    }
}

/// `250ms`, `42s`, `3m 20s`, `2h 5m`, `3d 4h`.
pub(crate) fn duration(micros: Micros) -> String {
    let ms = micros / 1000;
    let s = ms / 1000;
    match s {
        _ if s < 1 => format!("{ms}ms"),
        _ if s < 60 => format!("{s}s"),
        _ if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        _ if s < 86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// The first 12 characters of a fingerprint, as people quote them.
pub(crate) fn short_version(version: &str) -> &str {
    version.get(..12).unwrap_or(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_text_is_inert() {
        assert_eq!(
            escape("<script>alert('x')</script> & \"q\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
        assert_eq!(url_part("a b/c?d"), "a%20b%2Fc%3Fd");
    }

    #[test]
    fn instants_read_and_print_in_utc() {
        let at = parse_instant("2026-12-06T00:43:32");
        assert_eq!(at.map(instant).as_deref(), Some("2026-12-06 00:43:32 UTC"));
        assert_eq!(
            parse_instant("2024-02-29").map(instant).as_deref(),
            Some("2024-02-29 00:00:00 UTC")
        );
        assert_eq!(parse_instant("1970-01-01T00:00"), Some(0));
        assert_eq!(parse_instant("2023-02-29"), None);
        assert_eq!(parse_instant("2023-13-01"), None);
        assert_eq!(parse_instant("yesterday"), None);
        assert_eq!(parse_instant("2023-01-01T25:00"), None);
    }

    #[test]
    fn durations_take_the_largest_units() {
        assert_eq!(duration(250_000), "250ms");
        assert_eq!(duration(200_000_000), "3m 20s");
        assert_eq!(duration(90_000_000_000), "1d 1h");
        assert_eq!(relative(1, 2_000_001), "2s ago");
    }
}
