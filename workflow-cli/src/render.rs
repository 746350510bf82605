//! Plain-text output: aligned tables and readable times.

use std::fmt::Write as _;

use workflow_runtime::store::Micros;

/// A table with a header row, printed with columns aligned to their widest cell.
#[derive(Debug, Default)]
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, or `empty` (a line saying there is nothing) when it has no rows.
    pub(crate) fn render_or(&self, empty: &str) -> String {
        if self.rows.is_empty() {
            format!("{empty}\n")
        } else {
            self.render()
        }
    }

    pub(crate) fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                let width = cell.chars().count();
                match widths.get_mut(i) {
                    Some(w) => *w = (*w).max(width),
                    None => widths.push(width),
                }
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                let width = widths.get(i).copied().unwrap_or(0);
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let _ = write!(line, "{cell:<width$}  ");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `2026-12-01 10:15:31Z` for a UTC instant in microseconds.
pub(crate) fn instant(at: Micros) -> String {
    let secs = at.div_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}Z",
        rest / 3600,
        (rest % 3600) / 60,
        rest % 60
    )
}

/// `3d 4h`, `12m 5s`, `800ms`: a duration in microseconds, two units at most.
pub(crate) fn duration(micros: Micros) -> String {
    let negative = micros < 0;
    let micros = micros.unsigned_abs();
    let ms = micros / 1000;
    let text = if ms < 1000 {
        format!("{ms}ms")
    } else {
        let secs = ms / 1000;
        let (d, h, m, s) = (
            secs / 86_400,
            (secs % 86_400) / 3600,
            (secs % 3600) / 60,
            secs % 60,
        );
        if d > 0 {
            format!("{d}d {h}h")
        } else if h > 0 {
            format!("{h}h {m}m")
        } else if m > 0 {
            format!("{m}m {s}s")
        } else {
            format!("{s}s")
        }
    };
    if negative { format!("-{text}") } else { text }
}

/// "in 5m 2s" or "3m 1s ago", relative to `now`.
pub(crate) fn relative(at: Micros, now: Micros) -> String {
    let delta = at.saturating_sub(now);
    if delta >= 0 {
        format!("in {}", duration(delta))
    } else {
        format!("{} ago", duration(-delta))
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// A cell for an optional value.
pub(crate) fn or_dash(value: Option<&str>) -> String {
    value.map_or_else(|| "-".to_owned(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_and_durations_read_as_people_write_them() {
        assert_eq!(instant(0), "1970-01-01 00:00:00Z");
        assert_eq!(instant(1_796_116_531_000_000), "2026-12-01 09:15:31Z");
        assert_eq!(instant(951_825_600_000_000), "2000-02-29 12:00:00Z");
        assert_eq!(duration(800_000), "800ms");
        assert_eq!(duration(65_000_000), "1m 5s");
        assert_eq!(duration(3 * 86_400_000_000 + 4 * 3_600_000_000), "3d 4h");
        assert_eq!(relative(10_000_000, 4_000_000), "in 6s");
        assert_eq!(relative(4_000_000, 10_000_000), "6s ago");
    }

    #[test]
    fn tables_align_their_columns() {
        let mut table = Table::new(&["ID", "STATUS"]);
        table.row(vec!["order-1".into(), "Suspended".into()]);
        table.row(vec!["o2".into(), "Finished".into()]);
        assert_eq!(
            table.render(),
            "ID       STATUS\norder-1  Suspended\no2       Finished\n"
        );
    }
}
