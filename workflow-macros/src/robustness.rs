//! Robustness of both macros: valid inputs with random token mutations (deleted, duplicated,
//! swapped, replaced or inserted tokens, idents replaced, the stream truncated) never panic
//! the parse -> lower -> validate -> expand pipeline; the output is always Rust that parses,
//! and any problem is a `compile_error!` with a message.

use std::str::FromStr;

use proc_macro2::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};
use proptest::prelude::*;

/// A token stream flattened: groups become an opening and a closing marker, so a mutation can
/// break delimiters too; [`rebuild`] balances them again.
#[derive(Debug, Clone)]
enum Flat {
    Open(Delimiter),
    Close,
    Leaf(TokenTree),
}

fn flatten(stream: TokenStream, out: &mut Vec<Flat>) {
    for tree in stream {
        match tree {
            TokenTree::Group(group) => {
                out.push(Flat::Open(group.delimiter()));
                flatten(group.stream(), out);
                out.push(Flat::Close);
            }
            leaf => out.push(Flat::Leaf(leaf)),
        }
    }
}

/// Back to a stream: a closing marker without an open group is dropped, groups still open at
/// the end are closed.
fn rebuild(flat: Vec<Flat>) -> TokenStream {
    let mut stack: Vec<(Delimiter, Vec<TokenTree>)> = vec![(Delimiter::None, Vec::new())];
    for token in flat {
        match token {
            Flat::Open(delimiter) => stack.push((delimiter, Vec::new())),
            Flat::Close => close(&mut stack),
            Flat::Leaf(leaf) => {
                if let Some((_, trees)) = stack.last_mut() {
                    trees.push(leaf);
                }
            }
        }
    }
    while stack.len() > 1 {
        close(&mut stack);
    }
    stack
        .pop()
        .map(|(_, trees)| trees.into_iter().collect())
        .unwrap_or_default()
}

fn close(stack: &mut Vec<(Delimiter, Vec<TokenTree>)>) {
    if stack.len() < 2 {
        return;
    }
    if let Some((delimiter, trees)) = stack.pop() {
        let group = Group::new(delimiter, trees.into_iter().collect());
        if let Some((_, parent)) = stack.last_mut() {
            parent.push(TokenTree::Group(group));
        }
    }
}

/// Idents a mutation may write: the DSLs' keywords and options, Rust keywords, names of the
/// inputs and near misses of them.
const IDENTS: &[&str] = &[
    "task",
    "event",
    "after",
    "decide",
    "switch",
    "fork",
    "join",
    "end",
    "finish",
    "fault",
    "workflow",
    "sequence",
    "saga",
    "cron",
    "every",
    "start",
    "on",
    "entry",
    "exit",
    "state",
    "when",
    "action",
    "display",
    "id",
    "data",
    "initial",
    "name",
    "retry",
    "commit",
    "timeout",
    "key",
    "trigger",
    "secs",
    "mins",
    "hours",
    "days",
    "millis",
    "Duration",
    "from_secs",
    "all",
    "any",
    "true",
    "false",
    "default",
    "enum",
    "struct",
    "fn",
    "pub",
    "crate",
    "self",
    "Self",
    "r#type",
    "New",
    "Nwe",
    "Done",
    "Paid",
    "pay",
    "pya",
    "check",
    "Data",
    "attempts",
    "backoff",
    "multiplier",
    "jitter",
    "before",
    "after_each_activity",
    "compensate",
    "left",
    "_",
];

/// Other tokens a mutation may insert.
fn leaf(choice: usize) -> TokenTree {
    let puncts = [
        '=', '>', '-', '.', ',', ';', ':', '#', '!', '<', '?', '*', '/', '+', '&',
    ];
    let span = Span::call_site();
    match choice % 8 {
        0..=2 => {
            let name = IDENTS
                .get(choice / 8 % IDENTS.len())
                .copied()
                .unwrap_or("x");
            TokenTree::Ident(match name.strip_prefix("r#") {
                Some(raw) => Ident::new_raw(raw, span),
                None => Ident::new(name, span),
            })
        }
        3 | 4 => {
            let c = puncts
                .get(choice / 8 % puncts.len())
                .copied()
                .unwrap_or('=');
            let spacing = if choice.is_multiple_of(2) {
                Spacing::Alone
            } else {
                Spacing::Joint
            };
            TokenTree::Punct(Punct::new(c, spacing))
        }
        5 => TokenTree::Literal(match choice / 8 % 6 {
            0 => Literal::string(""),
            1 => Literal::string("wf.reserved"),
            2 => Literal::u64_unsuffixed(0),
            3 => Literal::u128_unsuffixed(u128::MAX),
            4 => Literal::f64_unsuffixed(0.5),
            _ => Literal::string("a name with spaces"),
        }),
        6 => TokenTree::Literal(Literal::i64_suffixed(-1)),
        _ => TokenTree::Literal(Literal::string("payment")),
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Duplicate(usize),
    Swap(usize, usize),
    Replace(usize, usize),
    ReplaceIdent(usize, usize),
    Insert(usize, usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => any::<usize>().prop_map(Mutation::Delete),
        2 => any::<usize>().prop_map(Mutation::Duplicate),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Replace(a, b)),
        3 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::ReplaceIdent(a, b)),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Insert(a, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(stream: &TokenStream, mutations: &[Mutation]) -> TokenStream {
    let mut flat = Vec::new();
    flatten(stream.clone(), &mut flat);
    for mutation in mutations {
        if flat.is_empty() {
            break;
        }
        let len = flat.len();
        match *mutation {
            Mutation::Delete(i) => {
                flat.remove(i % len);
            }
            Mutation::Duplicate(i) => {
                if let Some(copy) = flat.get(i % len).cloned() {
                    flat.insert(i % len, copy);
                }
            }
            Mutation::Swap(a, b) => flat.swap(a % len, b % len),
            Mutation::Replace(i, choice) => {
                if let Some(slot) = flat.get_mut(i % len) {
                    *slot = Flat::Leaf(leaf(choice));
                }
            }
            Mutation::ReplaceIdent(i, word) => {
                // The first ident at or after `i`, replaced by a word of the vocabulary.
                let at = (0..len)
                    .map(|k| (i + k) % len)
                    .find(|&k| matches!(flat.get(k), Some(Flat::Leaf(TokenTree::Ident(_)))));
                if let Some(slot) = at.and_then(|k| flat.get_mut(k)) {
                    *slot = Flat::Leaf(leaf(word % IDENTS.len() * 8));
                }
            }
            Mutation::Insert(i, choice) => flat.insert(i % (len + 1), Flat::Leaf(leaf(choice))),
            Mutation::Truncate(n) => flat.truncate(n % len),
        }
    }
    rebuild(flat)
}

fn tokens(text: &str) -> TokenStream {
    TokenStream::from_str(text).unwrap_or_default()
}

/// What every expansion must be: Rust that parses as items (so rustc reports the
/// `compile_error!`s, not a broken expansion), each error with a message.
fn check_output(output: &TokenStream) -> Result<(), TestCaseError> {
    let parsed = syn::parse2::<syn::File>(output.clone());
    prop_assert!(parsed.is_ok(), "unparsable expansion: {}", output);
    let text = output.to_string();
    for (i, _) in text.match_indices("compile_error !") {
        let after = text.get(i..).unwrap_or_default();
        prop_assert!(
            after.starts_with("compile_error ! { \"")
                && !after.starts_with("compile_error ! { \"\""),
            "an error without a message: {}",
            text
        );
    }
    Ok(())
}

const STATE_MACHINE_ARGS: &[&str] = &[
    "data = Order, initial = New",
    "data = Order, initial = New, name = \"OrderFlow\", retry(attempts = 3, backoff = secs(1)..mins(1))",
];

const STATE_MACHINE_ITEMS: &[&str] = &[
    r#"
    #[derive(Debug)]
    pub enum Flow {
        #[on(go: event("go") => Done, when = ready)]
        New,
        Done,
    }
    "#,
    r#"
    /// An order from checkout to delivery.
    pub enum OrderFlow {
        #[entry(send_confirmation)]
        #[exit(log_exit)]
        #[on(=> Paid, when = is_free)]
        #[on(pay: event::<Payment>("payment").key(order_id) => Paid, when = covers_amount, action = record_payment)]
        #[on(cancel: event("cancel").key(order_id) => Cancelled, display = "Cancel the order")]
        #[on(expire: after(Duration::from_secs(48 * 3600)) => Cancelled)]
        #[on(audit: task(run_audit).retry(attempts = 2).timeout(secs(30)) => New, id = "audit_task")]
        New,
        #[on(ship: event("shipped") => Shipped)]
        Paid,
        #[state(name = "shipped", display = "Shipped to the customer")]
        Shipped,
        Cancelled,
    }
    "#,
];

const WORKFLOWS: &[&str] = &[
    r#"
    /// Approval.
    pub workflow Approval(Data) {
        check = decide(is_large);
        pay = task(pay_out);
        ask = task(ask_manager);

        start -> check;
        check.true -> ask -> pay;
        check.false -> pay;
    }
    "#,
    r#"
    pub workflow Archive(ExpenseData) = sequence [
        task(audit),
        after(Duration::from_secs(48 * 3600)),
        stored = task(archive),
    ];
    "#,
    r#"
    #[workflow(name = "ExpenseApproval")]
    pub workflow Expense(ExpenseData) {
        submit  = task(submit_expense);
        check   = decide(is_large);
        route   = switch { high: is_high, low: is_low };
        review  = task(auto_review) -> [approved, rejected, manual];
        manager = event::<Decision>("expense.decision").key(expense_id).timeout(hours(24))
                  -> [approved, rejected];
        pay     = task(pay_out).retry(attempts = 5, multiplier = 2, jitter = 0.2);
        reject  = task(notify_rejected);
        split   = fork [left, right];
        remind  = after(mins(30));
        later   = sequence [task(audit), after(secs(5)), task(archive)];
        merge   = join(all);
        archive = workflow(Archive);
        refused = fault("rejected", "the expense was rejected");
        done    = end;

        start -> submit -> check;
        check.true -> review;
        check.false -> route;
        route.high -> review;
        route.low -> pay;
        route.default -> review;
        review.approved -> pay;   review.rejected -> reject;   review.manual -> manager;
        manager.approved -> pay;  manager.rejected -> reject;  manager.timeout -> reject;
        reject -> refused;
        pay -> split;
        split.left -> remind -> merge;
        split.right -> later -> merge;
        merge -> archive -> done;
    }
    "#,
    r#"
    #[workflow(saga = continue)]
    pub workflow Reopen(ExpenseData) {
        reopened = event("expense.reopened").key(expense_id).trigger();
        charge = task(charge).compensate(refund);
        tick = every(mins(5));
        finished = finish;

        reopened -> charge -> finished;
    }
    "#,
];

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(256),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

#[test]
fn the_unmutated_inputs_expand_without_errors_where_they_are_complete() {
    // The inputs are valid DSL (their fns are not in scope here, which only rustc would see).
    for args in STATE_MACHINE_ARGS {
        for item in STATE_MACHINE_ITEMS {
            let output = crate::state_machine::state_machine(tokens(args), tokens(item));
            assert!(!output.to_string().contains("compile_error"), "{output}");
            assert!(syn::parse2::<syn::File>(output).is_ok());
        }
    }
    for input in WORKFLOWS {
        let output = crate::workflow::workflow(tokens(input));
        let text = output.to_string();
        // `every` is a trigger kind: the saga example may be refused by a rule, never a panic.
        assert!(syn::parse2::<syn::File>(output).is_ok(), "{text}");
        if !input.contains("every") {
            assert!(!text.contains("compile_error"), "{text}");
        }
    }
}

#[test]
fn a_keyword_as_key_path_is_an_error_not_a_broken_expansion() {
    // Found by the mutation test below: `.key(true)` expanded to `data.true`.
    for key in ["true", "self", "type", "order_id.fn"] {
        let item =
            format!(r#"pub enum Flow {{ #[on(go: event("go").key({key}) => Done)] New, Done }}"#);
        let output = crate::state_machine::state_machine(
            tokens("data = Order, initial = New"),
            tokens(&item),
        );
        let text = output.to_string();
        assert!(syn::parse2::<syn::File>(output).is_ok(), "{text}");
        assert!(
            text.contains("is a keyword, not a field of the data"),
            "{text}"
        );
    }
    let raw = r#"pub enum Flow { #[on(go: event("go").key(r#type) => Done)] New, Done }"#;
    let output =
        crate::state_machine::state_machine(tokens("data = Order, initial = New"), tokens(raw));
    assert!(!output.to_string().contains("compile_error"), "{output}");
}

#[test]
fn rebuild_balances_what_mutations_break() {
    let mut flat = Vec::new();
    flatten(tokens("a { b ( c ) } d"), &mut flat);
    assert_eq!(rebuild(flat.clone()).to_string(), "a { b (c) } d");
    flat.remove(1); // the `{`: its `}` closes nothing and goes
    assert_eq!(rebuild(flat.clone()).to_string(), "a b (c) d");
    flat.truncate(3); // `a b (`: the open group is closed
    assert_eq!(rebuild(flat).to_string(), "a b ()");
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_state_machines_never_panic(
        args in 0..STATE_MACHINE_ARGS.len(),
        item in 0..STATE_MACHINE_ITEMS.len(),
        on_args in prop::bool::weighted(0.2),
        mutations in prop::collection::vec(mutation(), 1..5),
    ) {
        let mut args = tokens(STATE_MACHINE_ARGS.get(args).copied().unwrap_or_default());
        let mut item = tokens(STATE_MACHINE_ITEMS.get(item).copied().unwrap_or_default());
        if on_args {
            args = mutate(&args, &mutations);
        } else {
            item = mutate(&item, &mutations);
        }
        let output = crate::state_machine::state_machine(args, item);
        check_output(&output)?;
    }

    #[test]
    fn mutated_workflows_never_panic(
        input in 0..WORKFLOWS.len(),
        mutations in prop::collection::vec(mutation(), 1..5),
    ) {
        let input = mutate(&tokens(WORKFLOWS.get(input).copied().unwrap_or_default()), &mutations);
        let output = crate::workflow::workflow(input);
        check_output(&output)?;
    }
}
