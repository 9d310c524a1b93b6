//! State values as SQL constants: the claim statements carry the model's ready/claimed/done/failed
//! states in their text, so the derive reads each value as a literal and escapes it here, at
//! compile time. A value that is not a literal, or that cannot be quoted the same way on every
//! backend, is an error at that value.

use proc_macro2::TokenStream;
use quote::quote;
use syn::spanned::Spanned as _;
use syn::{Expr, Lit, UnOp};

use crate::attrs::{ClaimableAttrs, Errors};

/// A state value's SQL: `Some(text)` (`'new'`, `42`, `TRUE`), or `None` for `NULL`.
pub(crate) fn sql(e: &Expr) -> syn::Result<Option<String>> {
    match e {
        Expr::Lit(l) => lit_sql(&l.lit).map(Some),
        Expr::Paren(p) => sql(&p.expr),
        Expr::Group(g) => sql(&g.expr),
        Expr::Unary(u) if matches!(u.op, UnOp::Neg(_)) => match &*u.expr {
            Expr::Lit(syn::ExprLit {
                lit: Lit::Int(i), ..
            }) => Ok(Some(format!("-{}", int(i)?))),
            _ => Err(not_a_literal(e)),
        },
        Expr::Path(p) if p.path.is_ident("None") => Ok(None),
        // `Some(v)`, `String::from(v)`: the value of an `Option<…>` or `String` field.
        Expr::Call(c) if c.args.len() == 1 && is_wrapper(&c.func) => sql(&c.args[0]),
        // `v.into()`, `v.to_string()`, `v.to_owned()`.
        Expr::MethodCall(m)
            if m.args.is_empty()
                && ["into", "to_string", "to_owned"].contains(&m.method.to_string().as_str()) =>
        {
            sql(&m.receiver)
        }
        _ => Err(not_a_literal(e)),
    }
}

fn is_wrapper(func: &Expr) -> bool {
    let Expr::Path(p) = func else { return false };
    let names: Vec<String> = p
        .path
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    matches!(
        names.iter().map(String::as_str).collect::<Vec<_>>()[..],
        ["Some"] | ["Option", "Some"] | ["String", "from"]
    )
}

fn lit_sql(lit: &Lit) -> syn::Result<String> {
    match lit {
        Lit::Str(s) => {
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
        Lit::Int(i) => int(i),
        Lit::Bool(b) => Ok(if b.value { "TRUE" } else { "FALSE" }.to_owned()),
        _ => Err(not_a_literal_span(lit.span())),
    }
}

fn int(i: &syn::LitInt) -> syn::Result<String> {
    i.base10_parse::<i64>().map(|v| v.to_string())
}

fn not_a_literal(e: &Expr) -> syn::Error {
    not_a_literal_span(e.span())
}

fn not_a_literal_span(span: proc_macro2::Span) -> syn::Error {
    syn::Error::new(
        span,
        "a state must be a string, integer or boolean literal, or `None` for NULL: it is written into the claim's SQL as a constant, so the statement is prepared once and matches a partial index\nhelp: the correct format looks like `#[claimable(ready = \"new\")]`, `ready = 0`, `ready = false` or `ready = None` (a literal may be wrapped in `Some(…)` or `.into()`)",
    )
}

/// Reports every state value that is not a safe literal.
pub(crate) fn check(a: &ClaimableAttrs, errors: &mut Errors) {
    let ready = a.ready.iter().flat_map(|r| r.value.iter());
    let others = [&a.claimed, &a.done, &a.failed]
        .into_iter()
        .flatten()
        .map(|s| &s.value);
    for e in ready.chain(others) {
        if let Err(err) = sql(e) {
            errors.push(err);
        }
    }
}

/// `::diesel_lease::__private::StateLiteral` for a checked value.
pub(crate) fn tokens(e: &Expr) -> TokenStream {
    match sql(e) {
        Ok(Some(text)) => quote!(::diesel_lease::__private::StateLiteral::sql(#text)),
        Ok(None) => quote!(::diesel_lease::__private::StateLiteral::NULL),
        Err(err) => err.into_compile_error(),
    }
}
