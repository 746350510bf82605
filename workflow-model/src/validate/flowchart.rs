//! Flowchart rules FC-V1..FC-V15 (flowchart.md section 7) and the analysis the engine uses.

use crate::definition::Flowchart;
use crate::diagnostics::{Diagnostics, Location};

/// What the validator computes once about a flowchart (FC-5, FC-6), for the engine and diagrams.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FlowchartAnalysis {
    /// The default start node (FC-6 steps 2-5), by node index.
    pub default_start: Option<usize>,
    /// For each connection index, whether it is backward (FC-5).
    pub backward: Vec<bool>,
}

/// Computes the start and the forward/backward split of a flowchart that passed validation.
pub fn analyze_flowchart(chart: &Flowchart) -> FlowchartAnalysis {
    let _ = chart;
    FlowchartAnalysis::default()
}

/// Checks one flowchart located at `at`, adding every violation to `cx`.
pub(super) fn check(chart: &Flowchart, at: &Location, cx: &mut Diagnostics) {
    let _ = (chart, at, cx);
}
