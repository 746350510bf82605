//! Diagnostics: what the validator reports, where, and how it reads.
//!
//! A [`Location`] is a path from the definition's root to one element, made of field names and
//! list indexes. It displays as a JSON Pointer (`/root/transitions/3/to`) for JSON definitions;
//! the macros keep a table from locations to the spans of the user's tokens, so the same
//! diagnostic becomes a `compile_error!` on the offending token.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

/// One step of a [`Location`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Segment {
    /// A field of an object.
    Field(Cow<'static, str>),
    /// An element of a list.
    Index(usize),
}

/// Where an element sits in a definition, from the definition's top.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location(Vec<Segment>);

impl Location {
    /// The definition itself.
    pub fn root() -> Self {
        Self(Vec::new())
    }

    /// This location extended by the field `name`.
    #[must_use]
    pub fn field(&self, name: impl Into<Cow<'static, str>>) -> Self {
        let mut path = self.0.clone();
        path.push(Segment::Field(name.into()));
        Self(path)
    }

    /// This location extended by the list index `index`.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        let mut path = self.0.clone();
        path.push(Segment::Index(index));
        Self(path)
    }

    /// The steps of the path, outermost first.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// Whether this location is `other` or inside it.
    pub fn starts_with(&self, other: &Location) -> bool {
        self.0.starts_with(&other.0)
    }

    /// The location as a JSON Pointer (RFC 6901), e.g. `/root/nodes/3/id`.
    pub fn json_pointer(&self) -> String {
        let mut out = String::new();
        for segment in &self.0 {
            out.push('/');
            match segment {
                Segment::Field(name) => out.push_str(&name.replace('~', "~0").replace('/', "~1")),
                Segment::Index(index) => out.push_str(&index.to_string()),
            }
        }
        out
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            f.write_str("/")
        } else {
            f.write_str(&self.json_pointer())
        }
    }
}

/// One problem found in a definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The rule that was broken, e.g. `"SM-C4"` or `"FC-V2"`.
    pub rule: &'static str,
    /// A rustc-style message: one line, lowercase, no trailing period, code in backticks.
    pub message: String,
    /// The offending element.
    pub at: Location,
    /// Other elements involved, each with what it is to this problem (for a duplicate, the
    /// other occurrence, "first used here").
    pub related: Vec<Related>,
    /// The declared name closest to the unknown one, when there is one (FC-25).
    pub suggestion: Option<String>,
}

impl Diagnostic {
    /// A diagnostic for `rule` at `at`.
    pub fn new(rule: &'static str, at: Location, message: impl Into<String>) -> Self {
        Self {
            rule,
            message: message.into(),
            at,
            related: Vec::new(),
            suggestion: None,
        }
    }

    /// The same diagnostic with a related location and its label: what that element is to
    /// the problem, written as rustc labels a secondary span (`"first used here"`).
    #[must_use]
    pub fn with_related(mut self, at: Location, label: impl Into<String>) -> Self {
        self.related.push(Related {
            at,
            label: label.into(),
        });
        self
    }
}

/// Another element involved in a [`Diagnostic`]: the earlier occurrence of a duplicate, the
/// transition that shadows this one, the other transitions of a loop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Related {
    /// Where the element is.
    pub at: Location,
    /// What it is to the problem, as rustc labels a secondary span: lowercase, no period
    /// (`"first used here"`).
    pub label: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}: {}", self.rule, self.at, self.message)
    }
}

/// Every problem found in one definition; never empty when returned as an error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(Vec<Diagnostic>);

impl Diagnostics {
    /// No diagnostics yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one.
    pub fn push(&mut self, diagnostic: Diagnostic) {
        self.0.push(diagnostic);
    }

    /// Reports the same message on two elements that conflict (a duplicate, FC-25): one
    /// diagnostic at each, each related to the other (the second's label is "first used
    /// here", the first's "used again here").
    pub fn push_pair(
        &mut self,
        rule: &'static str,
        first: Location,
        second: Location,
        message: &str,
    ) {
        self.0.push(
            Diagnostic::new(rule, first.clone(), message)
                .with_related(second.clone(), "used again here"),
        );
        self.0
            .push(Diagnostic::new(rule, second, message).with_related(first, "first used here"));
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many were found.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The diagnostics, in the order they were found.
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    /// `Ok(())` when empty, else `Err(self)`.
    ///
    /// # Errors
    ///
    /// The diagnostics themselves, when there is at least one.
    pub fn into_result(self) -> Result<(), Diagnostics> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.0.len();
        write!(
            f,
            "{count} problem{} in the definition",
            if count == 1 { "" } else { "s" }
        )?;
        for diagnostic in &self.0 {
            write!(f, "\n  {diagnostic}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter = std::vec::IntoIter<Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Extend<Diagnostic> for Diagnostics {
    fn extend<T: IntoIterator<Item = Diagnostic>>(&mut self, iter: T) {
        self.0.extend(iter);
    }
}

/// The candidate closest to `name` by edit distance compared without case, when it is at most a
/// third of `name`'s length away (rounded up, at least 1); ties go to the earlier candidate
/// (FC-25). An exact match is not a suggestion.
///
/// The work is bounded: a name longer than [`MAX_SUGGESTED_CHARS`] gets no suggestion, a
/// candidate whose length alone puts it too far is skipped without comparing, and each
/// comparison stops as soon as it cannot come within the limit (a banded edit distance, time
/// and memory linear in the candidate's length for a given name). Within [`crate::validate`]
/// and [`crate::Definition::from_json`], all suggestions together share a fixed budget of
/// work, so a definition with many long near-miss names is still validated in milliseconds
/// (the names past the budget get no suggestion).
///
/// ```
/// use workflow_model::suggest;
///
/// assert_eq!(suggest("Shiped", ["Paid", "Shipped"]), Some("Shipped"));
/// let long = "a".repeat(100_000);
/// assert_eq!(suggest(&long, [long.as_str(), "a"]), None);
/// ```
pub fn suggest<'a, I>(name: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let name_chars = name.chars().count();
    if name_chars > MAX_SUGGESTED_CHARS {
        return None;
    }
    let limit = name_chars.div_ceil(3).max(1);
    let lower: Vec<char> = name.to_lowercase().chars().collect();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        if BUDGET.get() == Some(0) {
            break;
        }
        if candidate == name {
            continue;
        }
        // Lowercasing may change the length by a few chars; the banded distance is exact, this
        // pre-check only skips candidates that are far too long or too short to compare.
        let candidate_chars = candidate.chars().take(name_chars + 2 * limit + 1).count();
        if candidate_chars.abs_diff(name_chars) > 2 * limit {
            continue;
        }
        // Only a strictly better candidate can replace the current best.
        let bound = best.map_or(limit, |(d, _)| d.saturating_sub(1));
        // The most cells this comparison can compute; past the budget, the search stops with
        // what it has.
        let cells = u64::try_from(name_chars.saturating_mul(2 * bound + 1)).unwrap_or(u64::MAX);
        if !charge(cells) {
            break;
        }
        let other: Vec<char> = candidate.to_lowercase().chars().collect();
        if let Some(distance) = bounded_edit_distance(&lower, &other, bound) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}

thread_local! {
    /// The edit-distance cells [`suggest`] may still compute on this thread, when a budget is
    /// set ([`with_suggestion_budget`]).
    static BUDGET: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The suggestion work one validation may do, in edit-distance cells: about 20 ms. A
/// definition with a thousand near-miss names of 250 chars would need 40 billion; within the
/// budget the first unknown names get their suggestion, the rest none.
pub(crate) const SUGGESTION_BUDGET: u64 = 20_000_000;

/// Runs `f` with at most `cells` edit-distance cells for all its suggestions (the budget of
/// an enclosing call is put back afterwards).
pub(crate) fn with_suggestion_budget<T>(cells: u64, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<u64>);
    impl Drop for Restore {
        fn drop(&mut self) {
            BUDGET.set(self.0);
        }
    }
    let _restore = Restore(BUDGET.replace(Some(cells)));
    f()
}

/// Takes `cells` from the budget; `false` when it does not have them (and then it is spent).
fn charge(cells: u64) -> bool {
    match BUDGET.get() {
        None => true,
        Some(left) if left >= cells => {
            BUDGET.set(Some(left - cells));
            true
        }
        Some(_) => {
            BUDGET.set(Some(0));
            false
        }
    }
}

/// Names longer than this (in chars) get no suggestion from [`suggest`]: the validator's size
/// limits (DEF-3) keep names shorter, and a suggestion for a longer one would not help.
pub const MAX_SUGGESTED_CHARS: usize = 256;

/// `"; did you mean `x`?"` for the closest candidate, or an empty string.
pub fn did_you_mean<'a, I>(name: &str, candidates: I) -> (String, Option<String>)
where
    I: IntoIterator<Item = &'a str>,
{
    match suggest(name, candidates) {
        Some(found) => (format!("; did you mean `{found}`?"), Some(found.to_owned())),
        None => (String::new(), None),
    }
}

/// `` `a`, `b`, `c` `` for a hint listing valid choices.
pub fn backticked<'a, I>(names: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    names
        .into_iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The most names an "expected one of" list shows; the rest are counted.
pub(crate) const MAX_LISTED_CHOICES: usize = 12;

/// `` `A`, `B`, `C` `` for an "expected one of" hint: each distinct name once, in the order
/// given, at most [`MAX_LISTED_CHOICES`] of them and then how many more there are, so a
/// definition with thousands of names gets short messages (and linear work) for each of its
/// unknown names.
pub(crate) fn choices<'a, I>(names: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    let mut seen = std::collections::HashSet::new();
    let mut listed = Vec::with_capacity(MAX_LISTED_CHOICES);
    let mut more = 0usize;
    for name in names {
        if !seen.insert(name) {
            continue;
        }
        if listed.len() < MAX_LISTED_CHOICES {
            listed.push(name);
        } else {
            more += 1;
        }
    }
    let mut text = backticked(listed);
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}

/// Edit distance over chars where an insertion, a deletion, a substitution or a swap of two
/// neighbours costs 1 (optimal string alignment), so `Nwe` is one edit from `New`; `None` when
/// it is more than `bound`. Only the cells within `bound` of the diagonal are computed, three
/// rows at a time, and the search stops once a whole row is over the bound.
#[allow(clippy::indexing_slicing)] // every index is bounded by the lengths the rows were built with
fn bounded_edit_distance(a: &[char], b: &[char], bound: usize) -> Option<usize> {
    if a.len().abs_diff(b.len()) > bound {
        return None;
    }
    let over = bound + 1;
    let width = b.len() + 1;
    // Row i-2, row i-1 and row i; cells outside the band hold `over`.
    let mut before = vec![over; width];
    let mut previous: Vec<usize> = (0..width).map(|j| j.min(over)).collect();
    let mut current = vec![over; width];
    for i in 1..=a.len() {
        let low = i.saturating_sub(bound).max(1);
        let high = (i + bound).min(b.len());
        current.fill(over);
        current[0] = i.min(over);
        let mut row_min = current[0];
        for j in low..=high {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best.min(over);
            row_min = row_min.min(current[j]);
        }
        if row_min > bound {
            return None;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    let distance = previous[b.len()];
    (distance <= bound).then_some(distance)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_the_closest_declared_name_fc_25() {
        assert_eq!(suggest("Nwe", ["New", "Paid"]), Some("New"));
        assert_eq!(suggest("Shiped", ["Paid", "Shipped"]), Some("Shipped"));
        assert_eq!(suggest("reveiw", ["review", "submit"]), Some("review"));
        assert_eq!(suggest("zzz", ["New", "Paid"]), None);
    }

    #[test]
    fn suggestion_ignores_case_and_prefers_the_earlier_tie() {
        assert_eq!(suggest("NEW", ["new", "few"]), Some("new"));
        assert_eq!(suggest("ab", ["ax", "ay"]), Some("ax"));
    }

    /// The distance of the plain quadratic table, to check the banded one against.
    #[allow(clippy::indexing_slicing)]
    fn full_edit_distance(a: &[char], b: &[char]) -> usize {
        let width = b.len() + 1;
        let mut table = vec![0usize; (a.len() + 1) * width];
        for i in 0..=a.len() {
            table[i * width] = i;
        }
        for (j, cell) in table.iter_mut().enumerate().take(width) {
            *cell = j;
        }
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                let mut best = (table[(i - 1) * width + j] + 1)
                    .min(table[i * width + j - 1] + 1)
                    .min(table[(i - 1) * width + j - 1] + cost);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    best = best.min(table[(i - 2) * width + j - 2] + 1);
                }
                table[i * width + j] = best;
            }
        }
        table[a.len() * width + b.len()]
    }

    #[test]
    fn the_banded_distance_agrees_with_the_full_table() {
        let words = [
            "", "a", "ab", "ba", "abc", "acb", "New", "Nwe", "Paid", "Shipped", "Shiped", "review",
            "reveiw", "abcdef", "badcfe", "kitten", "sitting", "xyz",
        ];
        for a in words {
            for b in words {
                let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
                let full = full_edit_distance(&a, &b);
                for bound in 0..8 {
                    let expected = (full <= bound).then_some(full);
                    assert_eq!(
                        bounded_edit_distance(&a, &b, bound),
                        expected,
                        "{a:?} {b:?} {bound}"
                    );
                }
            }
        }
    }

    #[test]
    fn suggestions_for_long_names_are_bounded() {
        // 32 000 chars once needed an 8 GB table; now: no suggestion, at once.
        let long = "a".repeat(32_000);
        let near = format!("{}b", "a".repeat(31_999));
        let started = std::time::Instant::now();
        assert_eq!(suggest(&long, [near.as_str()]), None);
        assert_eq!(did_you_mean(&near, [long.as_str()]).1, None);
        // A name at the limit is compared in a band, not a full table.
        let name = "a".repeat(MAX_SUGGESTED_CHARS);
        let close = format!("{}b", "a".repeat(MAX_SUGGESTED_CHARS - 1));
        let far = "b".repeat(32_000);
        assert_eq!(
            suggest(&name, [far.as_str(), close.as_str()]),
            Some(close.as_str())
        );
        assert!(
            started.elapsed() < std::time::Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn json_pointer_escapes() {
        let at = Location::root().field("root").field("a/b~c").index(3);
        assert_eq!(at.json_pointer(), "/root/a~1b~0c/3");
        assert_eq!(Location::root().to_string(), "/");
    }
}
