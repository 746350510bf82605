//! Lowering: the parsed [`WorkflowDecl`] to a `workflow_model::Definition` plus a span table
//! from each model [`Location`] to the user's tokens.
//!
//! Conventions (the same workflow written as JSON must follow them to get the same definition
//! and fingerprint):
//!
//! - the definition's name is `#[workflow(name = "...")]`, else the type's ident; its
//!   description is the doc comment, lines trimmed and joined with `\n`;
//! - the root activity's id is `root`: a flowchart, or a sequence for the `= sequence [..]`
//!   form;
//! - a node's id is the ident before `=`; a task without a port list declares exactly
//!   `["done"]` (FC-2), an event without one declares none (`done`);
//! - a sequence step's id is its `id =`, else a task's fn name (the path's last ident), else
//!   `{kind}_{index}` (`after_1`) with the 0-based position of the step;
//! - the registry name of a user fn is its path as written (`submit_expense`,
//!   `expenses::pay`); an event's `payload` is the type as written, without spaces
//!   (`Decision`); a `workflow(Shipping)` child is named by the type's ident.

use quote::ToTokens;
use syn::ext::IdentExt;
use workflow_model::{
    Activity, Break, Connection, Correlate, Cron, Definition, Delay, End, Fault, Finish, Flowchart,
    ForEach, Fork, If, Join, Location, Parallel, ParallelForEach, Saga, Sequence, SetVariable,
    StartAt, SubWorkflow, SubWorkflowMode, Switch, SwitchCase, Task, Timer, While,
};

use super::parse::{Body, KindDecl, StepDecl, WorkflowDecl};
use crate::common::SpanTable;
use crate::common::parse::FnRef;

/// The lowered workflow.
pub(crate) struct Lowered {
    pub(crate) definition: Definition,
    pub(crate) spans: SpanTable,
    /// The `id` locations of sequence steps named after their task's fn (no `id =`), with
    /// that fn's name: a duplicate there is fixed by naming one of them.
    pub(crate) unnamed_tasks: Vec<(Location, String)>,
}

/// The name of the workflow: `#[workflow(name = "...")]`, else the type's ident.
pub(crate) fn workflow_name(decl: &WorkflowDecl) -> String {
    match &decl.name {
        Some(lit) => lit.value(),
        None => decl.ident.unraw().to_string(),
    }
}

/// Lowers `decl` to the model.
pub(crate) fn lower(decl: &WorkflowDecl) -> Lowered {
    let mut spans = SpanTable::default();
    let top = Location::root();
    let at = top.field("root");
    spans.insert(top.clone(), &decl.ident);
    spans.insert(
        top.field("name"),
        decl.name
            .as_ref()
            .map_or_else(|| decl.ident.to_token_stream(), ToTokens::into_token_stream),
    );
    spans.insert(at.clone(), &decl.ident);
    let root: Activity = match &decl.body {
        Body::Flowchart {
            nodes,
            starts,
            connections,
            ..
        } => {
            let mut chart = Flowchart {
                id: "root".to_owned(),
                ..Flowchart::default()
            };
            for (i, node) in nodes.iter().enumerate() {
                let node_at = at.field("nodes").index(i);
                spans.insert(node_at.clone(), &node.tokens);
                spans.insert(node_at.field("id"), &node.id);
                chart.nodes.push(lower_kind(
                    &node.kind,
                    node.id.unraw().to_string(),
                    &node_at,
                    &mut spans,
                ));
            }
            for (i, start) in starts.iter().enumerate() {
                if starts.len() == 1 {
                    spans.insert(at.field("start"), start);
                }
                spans.insert(at.field("start").index(i), start);
                chart.start.push(start.unraw().to_string());
            }
            for (i, connection) in connections.iter().enumerate() {
                let c_at = at.field("connections").index(i);
                spans.insert(c_at.clone(), &connection.tokens);
                spans.insert(c_at.field("source"), &connection.source.node);
                match &connection.source.port {
                    Some(port) => spans.insert(c_at.field("port"), port),
                    None => spans.insert(c_at.field("port"), &connection.source.node),
                }
                spans.insert(c_at.field("target"), &connection.target);
                chart.connections.push(Connection::new(
                    connection.source.node.unraw().to_string(),
                    connection.source.port.as_ref().map_or_else(
                        || workflow_model::DONE.to_owned(),
                        |p| p.unraw().to_string(),
                    ),
                    connection.target.unraw().to_string(),
                ));
            }
            chart.into()
        }
        Body::Sequence { steps, .. } => Sequence {
            id: "root".to_owned(),
            steps: lower_steps(steps, &at, &mut spans),
        }
        .into(),
    };
    let options = &decl.options;
    let root = match &options.saga {
        // The root as a saga scope (FLT-10): a saga `root` around the body, renamed `body`.
        Some((on_failure, mode)) => {
            let mut body = root;
            *body.id_mut() = "body".to_owned();
            spans.insert(at.field("on_failure"), mode);
            Saga {
                id: "root".to_owned(),
                on_failure: *on_failure,
                body: Box::new(body),
            }
            .into()
        }
        None => root,
    };
    let mut definition = Definition::new(workflow_name(decl), root);
    if options.saga.is_some() {
        spans.remap_prefix(&at, &at.field("body"));
    }
    definition.description = decl.description();
    if let Some(retry) = &options.retry {
        retry.record(&top.field("retry"), &mut spans);
        definition.retry = Some(retry.policy());
    }
    if let Some((strategy, tokens)) = &options.commit {
        spans.insert(top.field("commit_strategy"), tokens);
        definition.commit_strategy = Some(*strategy);
    }
    if let Some(path) = &options.queue {
        spans.insert(top.field("queue"), path);
        definition.queue = Some(crate::common::queues::placeholder(path));
    }
    if let Some((activation, tokens)) = &options.activation {
        spans.insert(top.field("activation"), tokens);
        definition.activation = Some(*activation);
    }
    let unnamed_tasks = unnamed_tasks(&definition.root, &Location::root().field("root"));
    Lowered {
        definition,
        spans,
        unnamed_tasks,
    }
}

/// The steps of every sequence whose id is their task's fn name, i.e. written without `id =`
/// (the convention of [`step_id`]); found on the model, nested ones included.
fn unnamed_tasks(activity: &Activity, at: &Location) -> Vec<(Location, String)> {
    let mut out = Vec::new();
    collect_unnamed(activity, at, &mut out);
    out
}

fn collect_unnamed(activity: &Activity, at: &Location, out: &mut Vec<(Location, String)>) {
    match activity {
        Activity::Sequence(seq) => {
            for (i, step) in seq.steps.iter().enumerate() {
                let step_at = at.field("steps").index(i);
                if let Activity::Task(task) = step {
                    let last = task.function.rsplit("::").next().unwrap_or(&task.function);
                    if task.id == last {
                        out.push((step_at.field("id"), last.to_owned()));
                    }
                }
                collect_unnamed(step, &step_at, out);
            }
        }
        Activity::Flowchart(chart) => {
            for (i, node) in chart.nodes.iter().enumerate() {
                collect_unnamed(node, &at.field("nodes").index(i), out);
            }
        }
        Activity::Saga(saga) => collect_unnamed(&saga.body, &at.field("body"), out),
        Activity::If(i) => {
            if let Some(then) = &i.then {
                collect_unnamed(then, &at.field("then"), out);
            }
            if let Some(otherwise) = &i.r#else {
                collect_unnamed(otherwise, &at.field("else"), out);
            }
        }
        Activity::While(w) => collect_unnamed(&w.body, &at.field("body"), out),
        Activity::ForEach(f) => collect_unnamed(&f.body, &at.field("body"), out),
        Activity::ParallelForEach(f) => collect_unnamed(&f.body, &at.field("body"), out),
        Activity::Parallel(p) => {
            for (i, branch) in p.branches.iter().enumerate() {
                collect_unnamed(branch, &at.field("branches").index(i), out);
            }
        }
        Activity::Switch(sw) => {
            for (i, case) in sw.cases.iter().enumerate() {
                if let Some(body) = &case.body {
                    collect_unnamed(body, &at.field("cases").index(i).field("body"), out);
                }
            }
            if let Some(default) = &sw.default {
                collect_unnamed(default, &at.field("default"), out);
            }
        }
        _ => {}
    }
}

/// The id of the step at `index` (see the module docs).
pub(crate) fn step_id(step: &StepDecl, index: usize) -> String {
    match (&step.id, &step.kind) {
        (Some(id), _) => id.unraw().to_string(),
        (None, KindDecl::Task { function, .. }) => function
            .path
            .segments
            .last()
            .map(|s| s.ident.unraw().to_string())
            .unwrap_or_default(),
        (None, kind) => format!("{}_{index}", kind.keyword()),
    }
}

fn lower_steps(steps: &[StepDecl], at: &Location, spans: &mut SpanTable) -> Vec<Activity> {
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| {
            let step_at = at.field("steps").index(i);
            spans.insert(step_at.clone(), &step.tokens);
            if let Some(id) = &step.id {
                spans.insert(step_at.field("id"), id);
            }
            lower_kind(&step.kind, step_id(step, i), &step_at, spans)
        })
        .collect()
}

/// A structured kind's body: a sequence with id `id` at `at`.
fn lower_body(steps: &[StepDecl], id: &str, at: &Location, spans: &mut SpanTable) -> Activity {
    Sequence {
        id: id.to_owned(),
        steps: lower_steps(steps, at, spans),
    }
    .into()
}

fn idents(list: &[syn::Ident]) -> Vec<String> {
    list.iter().map(|p| p.unraw().to_string()).collect()
}

fn lower_kind(kind: &KindDecl, id: String, at: &Location, spans: &mut SpanTable) -> Activity {
    match kind {
        KindDecl::Task {
            function,
            options,
            ports,
        } => {
            spans.insert(at.field("function"), &function.path);
            let ports = match ports {
                Some(list) => {
                    spans.insert(at.field("ports"), &list.tokens);
                    for (j, port) in list.ports.iter().enumerate() {
                        spans.insert(at.field("ports").index(j), port);
                    }
                    idents(&list.ports)
                }
                None => vec![workflow_model::DONE.to_owned()],
            };
            let mut task = Task::new(id, function.name()).with_ports(ports);
            options.apply(&mut task, at, spans);
            task.into()
        }
        KindDecl::Saga {
            on_failure,
            mode,
            steps,
        } => {
            spans.insert(at.field("on_failure"), mode);
            let body_at = at.field("body");
            Saga {
                id,
                on_failure: *on_failure,
                body: Box::new(
                    Sequence {
                        id: "body".to_owned(),
                        steps: lower_steps(steps, &body_at, spans),
                    }
                    .into(),
                ),
            }
            .into()
        }
        KindDecl::Cron {
            expression,
            zone,
            missed,
            trigger,
        } => {
            spans.insert(at.field("expression"), expression);
            if let Some(zone) = zone {
                spans.insert(at.field("time_zone"), zone);
            }
            if let Some((_, tokens)) = missed {
                spans.insert(at.field("missed"), tokens);
            }
            Cron {
                id,
                expression: expression.value(),
                time_zone: zone.as_ref().map(syn::LitStr::value),
                trigger: *trigger,
                missed: missed.as_ref().map(|(m, _)| *m).unwrap_or_default(),
            }
            .into()
        }
        KindDecl::Every {
            millis,
            missed,
            trigger,
        } => {
            if let Some((_, tokens)) = missed {
                spans.insert(at.field("missed"), tokens);
            }
            Timer {
                id,
                interval_ms: *millis,
                body: None,
                until: None,
                max_ticks: None,
                trigger: *trigger,
                missed: missed.as_ref().map(|(m, _)| *m).unwrap_or_default(),
            }
            .into()
        }
        KindDecl::StartAt {
            at: instant,
            zone,
            trigger,
        } => {
            spans.insert(at.field("at"), instant);
            if let Some(zone) = zone {
                spans.insert(at.field("time_zone"), zone);
            }
            StartAt {
                id,
                at: Some(instant.value()),
                time_zone: zone.as_ref().map(syn::LitStr::value),
                at_fn: None,
                trigger: *trigger,
            }
            .into()
        }
        KindDecl::Event(node) => {
            let mut event = node.event.lower(id, at, spans);
            event.payload = node
                .event
                .payload
                .as_ref()
                .map(|ty| ty.to_token_stream().to_string().replace(' ', ""));
            if let Some(list) = &node.ports {
                spans.insert(at.field("ports"), &list.tokens);
                for (j, port) in list.ports.iter().enumerate() {
                    spans.insert(at.field("ports").index(j), port);
                }
                event.ports = Some(idents(&list.ports));
            }
            event.into()
        }
        KindDecl::If {
            condition,
            then,
            otherwise,
        } => {
            spans.insert(at.field("condition"), &condition.path);
            If {
                id,
                condition: condition.name(),
                then: Some(Box::new(lower_body(then, "then", &at.field("then"), spans))),
                r#else: otherwise
                    .as_ref()
                    .map(|steps| Box::new(lower_body(steps, "else", &at.field("else"), spans))),
            }
            .into()
        }
        KindDecl::While { condition, body } => {
            spans.insert(at.field("condition"), &condition.path);
            While {
                id,
                condition: condition.name(),
                body: Box::new(lower_body(body, "body", &at.field("body"), spans)),
            }
            .into()
        }
        KindDecl::ForEach { items, body } => {
            spans.insert(at.field("items"), &items.path);
            ForEach {
                id,
                items: items.name(),
                body: Box::new(lower_body(body, "body", &at.field("body"), spans)),
            }
            .into()
        }
        KindDecl::ParallelForEach {
            items,
            max_in_flight,
            body,
        } => {
            spans.insert(at.field("items"), &items.path);
            if let Some((_, tokens)) = max_in_flight {
                spans.insert(at.field("max_in_flight"), tokens);
            }
            ParallelForEach {
                id,
                items: items.name(),
                body: Box::new(lower_body(body, "body", &at.field("body"), spans)),
                max_in_flight: max_in_flight.as_ref().map(|(n, _)| *n),
            }
            .into()
        }
        KindDecl::Parallel { mode, branches } => {
            let branches_at = at.field("branches");
            let branches = branches
                .iter()
                .enumerate()
                .map(|(i, step)| {
                    let step_at = branches_at.index(i);
                    spans.insert(step_at.clone(), &step.tokens);
                    if let Some(id) = &step.id {
                        spans.insert(step_at.field("id"), id);
                    }
                    lower_kind(&step.kind, step_id(step, i), &step_at, spans)
                })
                .collect();
            Parallel {
                id,
                branches,
                mode: *mode,
            }
            .into()
        }
        KindDecl::StructuredSwitch {
            mode,
            cases,
            default,
        } => {
            let cases = cases
                .iter()
                .enumerate()
                .map(|(j, (label, condition, body))| {
                    let case_at = at.field("cases").index(j);
                    spans.insert(case_at.field("label"), label);
                    spans.insert(case_at.field("condition"), &condition.path);
                    let label = label.unraw().to_string();
                    SwitchCase {
                        body: Some(lower_body(body, &label, &case_at.field("body"), spans)),
                        label,
                        condition: condition.name(),
                    }
                })
                .collect();
            Switch {
                id,
                cases,
                mode: *mode,
                default: default.as_ref().map(|steps| {
                    Box::new(lower_body(steps, "default", &at.field("default"), spans))
                }),
            }
            .into()
        }
        KindDecl::Break => Break::new(id).into(),
        KindDecl::Set { variable, value } => {
            spans.insert(at.field("variable"), variable);
            spans.insert(at.field("value"), &value.path);
            SetVariable {
                id,
                variable: variable.unraw().to_string(),
                value: value.name(),
            }
            .into()
        }
        KindDecl::Correlate { key } => {
            spans.insert(at.field("key"), &key.path);
            Correlate {
                id,
                key: key.name(),
            }
            .into()
        }
        KindDecl::After { millis, .. } => Delay::new(id, *millis).into(),
        KindDecl::Decide { condition } => {
            spans.insert(at.field("condition"), &condition.path);
            If {
                id,
                condition: condition.name(),
                then: None,
                r#else: None,
            }
            .into()
        }
        KindDecl::Switch { mode, cases } => {
            let cases = cases
                .iter()
                .enumerate()
                .map(|(j, (label, condition))| {
                    let case_at = at.field("cases").index(j);
                    spans.insert(case_at.field("label"), label);
                    spans.insert(case_at.field("condition"), &condition.path);
                    SwitchCase {
                        label: label.unraw().to_string(),
                        condition: condition.name(),
                        body: None,
                    }
                })
                .collect();
            Switch {
                id,
                cases,
                mode: *mode,
                default: None,
            }
            .into()
        }
        KindDecl::Fork { tokens, branches } => {
            spans.insert(at.field("branches"), tokens);
            for (j, branch) in branches.iter().enumerate() {
                spans.insert(at.field("branches").index(j), branch);
            }
            Fork {
                id,
                branches: idents(branches),
            }
            .into()
        }
        KindDecl::Join { mode } => Join { id, mode: *mode }.into(),
        KindDecl::End => End::new(id).into(),
        KindDecl::Finish { output } => {
            if let Some(output) = output {
                spans.insert(at.field("output"), &output.path);
            }
            Finish {
                id,
                output: output.as_ref().map(FnRef::name),
            }
            .into()
        }
        KindDecl::Fault { code, message } => Fault {
            id,
            code: code.value(),
            message: message.as_ref().map(syn::LitStr::value).unwrap_or_default(),
        }
        .into(),
        KindDecl::Workflow(child, options) => {
            spans.insert(at.field("workflow"), child.tokens());
            if let Some((_, tokens)) = &options.timeout {
                spans.insert(at.field("deadline_ms"), tokens);
            }
            if let Some(f) = &options.input {
                spans.insert(at.field("input"), &f.path);
            }
            if let Some(f) = &options.assign {
                spans.insert(at.field("assign"), &f.path);
            }
            if let Some(detach) = &options.detach {
                spans.insert(at.field("mode"), detach);
            }
            SubWorkflow {
                id,
                workflow: child.name(),
                input: options.input.as_ref().map(FnRef::name),
                assign: options.assign.as_ref().map(FnRef::name),
                mode: if options.detach.is_some() {
                    SubWorkflowMode::Detach
                } else {
                    SubWorkflowMode::Wait
                },
                deadline_ms: options.timeout.as_ref().map(|(millis, _)| *millis),
            }
            .into()
        }
        KindDecl::Sequence { steps } => Sequence {
            id,
            steps: lower_steps(steps, at, spans),
        }
        .into(),
    }
}

/// Runs the shared validator; every diagnostic becomes an error on the user's tokens.
/// `syntax_errors` tells that some statements were dropped by a syntax error: the graph rules
/// (unreachable nodes, joins, loops) and "no start" are then not reported, since the dropped
/// statement is the likely cause.
/// A node whose declaration had a syntax error (`broken`) is not reported as unknown either.
pub(crate) fn validate(
    lowered: &Lowered,
    syntax_errors: bool,
    broken: &[String],
) -> Option<syn::Error> {
    let hint = |diagnostic: &workflow_model::Diagnostic| {
        let (_, function) = lowered.unnamed_tasks.iter().find(|(at, _)| {
            diagnostic.rule == "FC-V1"
                && (*at == diagnostic.at || diagnostic.related.iter().any(|r| r.at == *at))
        })?;
        Some(format!(
            "; a step is named after its task's fn: name one of them, as in `again = task({function})`"
        ))
    };
    crate::common::spans::validate_with(
        &lowered.definition,
        &lowered.spans,
        |diagnostic| {
            let graph = matches!(
                diagnostic.rule,
                "FC-V7" | "FC-V8" | "FC-V9" | "FC-V11" | "FC-V12" | "FC-V13"
            );
            let unknown_broken = diagnostic.rule == "FC-V2"
                && broken.iter().any(|id| {
                    diagnostic
                        .message
                        .starts_with(&format!("unknown node `{id}`"))
                });
            syntax_errors && (graph || unknown_broken)
        },
        hint,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::Errors;
    use crate::workflow::parse::parse;
    use proc_macro2::TokenStream;
    use quote::quote;

    fn lower_tokens(input: TokenStream) -> Lowered {
        let mut errors = Errors::default();
        let decl = parse(input, &mut errors).unwrap();
        assert!(errors.is_empty());
        lower(&decl)
    }

    fn expense() -> Lowered {
        lower_tokens(quote! {
            /// Expense approval.
            pub workflow Expense(ExpenseData) {
                submit  = task(submit_expense);
                review  = task(auto_review) -> [approved, rejected, manual];
                manager = event::<Decision>("expense.decision").key(expense_id) -> [approved, rejected];
                pay     = task(pay_out);
                reject  = task(notify_rejected);

                start -> submit -> review;
                review.approved -> pay;   review.rejected -> reject;   review.manual -> manager;
                manager.approved -> pay;  manager.rejected -> reject;
            }
        })
    }

    #[test]
    fn lowers_the_expense_flowchart_to_the_json_of_the_docs() {
        let json = include_str!("../../../workflow-model/docs/expense.json");
        assert_eq!(expense().definition, Definition::from_json(json).unwrap());
    }

    #[test]
    fn span_table_points_at_ports_targets_and_the_start() {
        let lowered = expense();
        let root = Location::root().field("root");
        let tokens = |at: Location| lowered.spans.tokens_of(&at).unwrap().to_string();
        let second = root.field("connections").index(1);
        assert_eq!(tokens(second.field("port")), "approved");
        assert_eq!(tokens(second.field("target")), "pay");
        assert_eq!(tokens(second.clone()), "review . approved -> pay");
        // `review -> ...` without a port: the port's diagnostics land on the source node.
        let first = root.field("connections").index(0);
        assert_eq!(tokens(first.field("port")), "submit");
        // A single start is `/root/start` (FC-V2 on the start), several are `/root/start/i`.
        assert_eq!(tokens(root.field("start")), "submit");
        assert_eq!(tokens(root.field("start").index(0)), "submit");
        let manager = root.field("nodes").index(2);
        assert_eq!(tokens(manager.field("id")), "manager");
        assert_eq!(tokens(manager.field("ports").index(1)), "rejected");
        assert_eq!(tokens(manager.field("event")), "\"expense.decision\"");
        assert_eq!(tokens(Location::root().field("name")), "Expense");
    }

    #[test]
    fn lowers_every_kind_with_the_id_conventions() {
        let lowered = lower_tokens(quote! {
            #[workflow(name = "Kinds")]
            workflow K(D) {
                check = decide(rules::is_large);
                route = switch { high: is_high, r#low: is_low };
                split = fork [left, right];
                merge = join(all);
                done  = end;
                stop  = finish;
                fail  = fault("rejected");
                child = workflow(shipping::Shipping);
                wait  = event("go").timeout(mins(5)).trigger();
                later = sequence [task(audit), after(secs(5)), fault("x", "y"), again = task(audit)];
            }
        });
        let definition = &lowered.definition;
        assert_eq!(definition.name, "Kinds");
        assert_eq!(definition.description, None);
        let Activity::Flowchart(chart) = &definition.root else {
            panic!("a flowchart")
        };
        let json = |i: usize| {
            let node = chart.nodes.get(i).unwrap().clone();
            Definition::new("x", node).to_json_pretty()
        };
        assert!(json(0).contains(r#""condition": "rules::is_large""#));
        assert!(json(1).contains(r#""label": "low""#));
        assert_eq!(
            chart.nodes[1].ports(),
            workflow_model::Ports::Declared(vec!["high", "low", "default"])
        );
        assert!(json(3).contains(r#""mode": "all""#));
        assert!(json(6).contains(r#""code": "rejected""#));
        assert!(json(7).contains(r#""workflow": "Shipping""#));
        let Activity::Event(wait) = &chart.nodes[8] else {
            panic!("an event")
        };
        assert!(wait.trigger);
        assert_eq!(wait.deadline_ms, Some(300_000));
        assert_eq!(wait.ports, None);
        let Activity::Sequence(later) = &chart.nodes[9] else {
            panic!("a sequence")
        };
        let ids: Vec<&str> = later.steps.iter().map(Activity::id).collect();
        assert_eq!(ids, ["audit", "after_1", "fault_2", "again"]);
    }
}
