//! State values as SQL constants: the claim statements carry the model's ready/claimed/done/failed
//! states in their text, so the derive reads each value as a literal and escapes it here, at
//! compile time. A value that is not a literal, or that cannot be quoted the same way on every
//! backend, is an error at that value.

use proc_macro2::TokenStream;
use quote::quote;
use syn::spanned::Spanned as _;
use syn::{Expr, Lit, UnOp};

use crate::attrs::{self, ClaimableAttrs, Errors};

/// A state value as written: its literal, and what the literal is wrapped in.
pub(crate) struct StateValue<'e> {
    pub(crate) literal: Literal<'e>,
    /// The outermost `Some(…)`, when there is one: the value of an `Option` field.
    pub(crate) some: Option<&'e Expr>,
    /// The `String::from(…)` or `….to_string()` around the literal, which makes a `String` of
    /// any literal while the SQL still carries the literal.
    pub(crate) stringified: Option<&'e Expr>,
}

/// The literal inside a state value.
pub(crate) enum Literal<'e> {
    /// `None`: SQL `NULL`.
    Null(&'e Expr),
    Str(&'e syn::LitStr),
    /// The value, and the literal's expression (with its sign).
    Int(i128, &'e Expr),
    Bool(&'e syn::LitBool),
}

impl Literal<'_> {
    /// The literal as written, for messages.
    pub(crate) fn text(&self) -> String {
        match self {
            Literal::Null(_) => "None".to_owned(),
            Literal::Str(s) => quote!(#s).to_string(),
            Literal::Int(v, _) => v.to_string(),
            Literal::Bool(b) => b.value.to_string(),
        }
    }

    pub(crate) fn span(&self) -> proc_macro2::Span {
        match self {
            Literal::Null(e) | Literal::Int(_, e) => e.span(),
            Literal::Str(s) => s.span(),
            Literal::Bool(b) => b.span(),
        }
    }
}

/// Reads a state value: a string, integer or boolean literal, or `None`, possibly wrapped in
/// `Some(…)`, `String::from(…)`, `.into()`, `.to_string()` or `.to_owned()`.
pub(crate) fn value(e: &Expr) -> syn::Result<StateValue<'_>> {
    match e {
        Expr::Lit(l) => Ok(bare(match &l.lit {
            Lit::Str(s) => Literal::Str(s),
            Lit::Int(i) => Literal::Int(i128::from(int(i)?), e),
            Lit::Bool(b) => Literal::Bool(b),
            _ => return Err(not_a_literal(e)),
        })),
        Expr::Paren(p) => value(&p.expr),
        Expr::Group(g) => value(&g.expr),
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => match &*u.expr {
            Expr::Lit(syn::ExprLit {
                lit: Lit::Int(i), ..
            }) => Ok(bare(Literal::Int(-i128::from(int(i)?), e))),
            _ => Err(not_a_literal(e)),
        },
        Expr::Path(p) if p.path.is_ident("None") => Ok(bare(Literal::Null(e))),
        Expr::Call(c) if c.args.len() == 1 => {
            let inner = value(&c.args[0]);
            match wrapper(&c.func) {
                Some(Wrapper::Some) => inner.map(|v| StateValue { some: Some(e), ..v }),
                Some(Wrapper::StringFrom) => inner.map(|v| StateValue {
                    stringified: Some(e),
                    ..v
                }),
                None => Err(not_a_literal(e)),
            }
        }
        Expr::MethodCall(m) if m.args.is_empty() => match m.method.to_string().as_str() {
            "into" | "to_owned" => value(&m.receiver),
            "to_string" => value(&m.receiver).map(|v| StateValue {
                stringified: Some(e),
                ..v
            }),
            _ => Err(not_a_literal(e)),
        },
        _ => Err(not_a_literal(e)),
    }
}

fn bare(literal: Literal<'_>) -> StateValue<'_> {
    StateValue {
        literal,
        some: None,
        stringified: None,
    }
}

/// A state value's SQL: `Some(text)` (`'new'`, `42`, `TRUE`), or `None` for `NULL`.
pub(crate) fn sql(e: &Expr) -> syn::Result<Option<String>> {
    Ok(match value(e)?.literal {
        Literal::Null(_) => None,
        Literal::Str(s) => Some(str_sql(s)?),
        Literal::Int(v, _) => Some(v.to_string()),
        Literal::Bool(b) => Some(if b.value { "TRUE" } else { "FALSE" }.to_owned()),
    })
}

enum Wrapper {
    Some,
    StringFrom,
}

fn wrapper(func: &Expr) -> Option<Wrapper> {
    let Expr::Path(p) = func else { return None };
    let names = crate::ty::segment_names(&p.path);
    match names.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["Some"] | ["Option", "Some"] => Some(Wrapper::Some),
        ["String", "from"] => Some(Wrapper::StringFrom),
        _ => None,
    }
}

fn str_sql(s: &syn::LitStr) -> syn::Result<String> {
    let v = s.value();
    if let Some(c) = v.chars().find(|c| *c == '\0' || *c == '\\') {
        let why = if c == '\0' {
            "a NUL character, which PostgreSQL cannot store in text"
        } else {
            "a backslash, which MySQL (and PostgreSQL without `standard_conforming_strings`) reads as an escape in a quoted literal"
        };
        return Err(syn::Error::new(
            s.span(),
            format!("this state contains {why}, so it cannot be written into the claim's SQL safely\nhelp: use a state name without `\\` or NUL, e.g. `\"ready\"`"),
        ));
    }
    Ok(format!("'{}'", v.replace('\'', "''")))
}

fn int(i: &syn::LitInt) -> syn::Result<i64> {
    i.base10_parse::<i64>()
}

fn not_a_literal(e: &Expr) -> syn::Error {
    syn::Error::new(
        e.span(),
        "a state must be a string, integer or boolean literal, or `None` for NULL: it is written into the claim's SQL as a constant, so the statement is prepared once and matches a partial index\nhelp: the correct format looks like `#[claimable(ready = \"new\")]`, `ready = 0`, `ready = false` or `ready = None` (a literal may be wrapped in `Some(…)` or `.into()`)",
    )
}

/// Reports every state value that is not a safe literal.
pub(crate) fn check(a: &ClaimableAttrs, errors: &mut Errors) {
    let ready = a.ready.iter().flat_map(|r| r.value.iter());
    let others = [&a.claimed, &a.done, &a.failed, &a.cancelled]
        .into_iter()
        .flatten()
        .map(|s| &s.value);
    for e in ready.chain(others) {
        if let Err(err) = sql(e) {
            errors.push(err);
        }
    }
    check_distinct(a, errors);
}

/// Reports a state that claims would mistake for another: a claimed or cancelled state that is
/// also a ready state (a claim would pick the row again: two workers run it, or a cancelled row
/// runs), or a done, failed or cancelled state that is the claimed one (a finished row would
/// look claimed, and be rescued and run again once stale). A done or failed state may be a
/// ready state on purpose: the row is then ready again (a recurring row, a retry); such a
/// failed state is then no state for cancelled rows ([`cancels_to_failed`]). Values that are
/// not literals are reported by [`check`] already.
///
/// Text states are compared as the database may compare them ([`same_state`]): `"new"` and
/// `"New "` are one state under MySQL's and MariaDB's default collations.
fn check_distinct(a: &ClaimableAttrs, errors: &mut Errors) {
    let ready: Vec<Option<String>> = a
        .ready
        .iter()
        .flat_map(|r| r.value.iter())
        .filter_map(|e| sql(e).ok())
        .collect();
    let claimed = a.claimed.as_ref().and_then(|c| sql(&c.value).ok());
    let states = [
        (attrs::CLAIMED, &a.claimed),
        (attrs::DONE, &a.done),
        (attrs::FAILED, &a.failed),
        (attrs::CANCELLED, &a.cancelled),
    ];
    for (key, state) in states {
        let Some(state) = state else { continue };
        let Ok(value) = sql(&state.value) else {
            continue;
        };
        // The value it clashes with, if any: among the ready states, or the claimed one.
        let (clash, why) = if key == attrs::CLAIMED || key == attrs::CANCELLED {
            let clash = ready.iter().find(|r| same_state(r, &value));
            let why = if key == attrs::CLAIMED {
                "is also a ready state: a claim would pick a row in it again, and two workers would run it"
            } else {
                "is also a ready state: a cancelled row would be claimed and run again"
            };
            (clash, why)
        } else {
            (None, "")
        };
        let (clash, why) = match (clash, &claimed) {
            (Some(c), _) => (c, why),
            (None, Some(c)) if key != attrs::CLAIMED && same_state(c, &value) => (
                c,
                "is the claimed state: a finished row would look claimed, and be rescued and run again once stale",
            ),
            _ => continue,
        };
        let collation = if *clash == value { "" } else { COLLATION_NOTE };
        let example = if key == attrs::CANCELLED {
            r#"#[claimable(ready = "new", claimed = "running", cancelled = "cancelled")]"#
        } else {
            r#"#[claimable(ready = "new", claimed = "running", done = "done")]"#
        };
        errors.push(syn::Error::new(
            state.value.span(),
            format!(
                "`{key}` {why}{collation}\nhelp: give `{key}` a state of its own, e.g. `{example}`"
            ),
        ));
    }
}

/// Appended when two states differ only in what a collation ignores.
const COLLATION_NOTE: &str = " (the two differ only in letter case or trailing spaces, which MySQL's and MariaDB's default collations and PostgreSQL's `citext` ignore)";

/// Whether two state values (SQL literals, `None` for NULL) can be one state to the database:
/// equal, or text literals equal once case and trailing spaces are ignored (a case-insensitive,
/// `PAD SPACE` collation; accent-insensitive ones also equate letters with and without
/// accents, which this does not fold).
fn same_state(a: &Option<String>, b: &Option<String>) -> bool {
    a == b
        || matches!((a, b), (Some(a), Some(b)) if a.starts_with('\'') && b.starts_with('\'') && fold(a) == fold(b))
}

/// A quoted text literal as a case-insensitive, `PAD SPACE` collation compares it.
fn fold(literal: &str) -> String {
    let text = literal
        .strip_prefix('\'')
        .and_then(|l| l.strip_suffix('\''))
        .unwrap_or(literal);
    text.trim_end_matches(' ').to_lowercase()
}

/// Whether cancelled rows of a model with these states can go to its failed state, as they do
/// when it has no cancelled state: it has one, and it is not a ready state (else a cancel would
/// put the row back in the queue).
pub(crate) fn cancels_to_failed(ready: &[Expr], failed: Option<&Expr>) -> bool {
    let Some(Ok(failed)) = failed.map(sql) else {
        return false;
    };
    !ready
        .iter()
        .any(|r| sql(r).is_ok_and(|r| same_state(&r, &failed)))
}

/// `::diesel_lease::__private::StateLiteral` for a checked value.
pub(crate) fn tokens(e: &Expr) -> TokenStream {
    match sql(e) {
        Ok(Some(text)) => quote!(::diesel_lease::__private::StateLiteral::sql(#text)),
        Ok(None) => quote!(::diesel_lease::__private::StateLiteral::NULL),
        Err(err) => err.into_compile_error(),
    }
}
