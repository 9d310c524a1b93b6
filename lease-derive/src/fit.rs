//! Attribute values against the fields they go into, as far as the fields' spelling tells
//! (`ty.rs`): a state literal must be of the state field's kind (`"1"` for a `String`, `1` for an
//! integer, `true` for a `bool`, `None` only for an `Option`), and a column the library sets to
//! NULL must be read into an `Option` field. What the spelling cannot tell (an alias, an enum, a
//! newtype) is left to the compiler's type checks in the expansion, spanned at the attribute.

use syn::Ident;

use crate::attrs::{self, ClaimableAttrs, Errors};
use crate::fields::{field, Field};
use crate::literal::{self, Literal, StateValue};
use crate::ty::{self, FieldType, Kind};

/// Checks the state values against the state field, and the fields of the columns that must be
/// nullable.
pub(crate) fn check(a: &ClaimableAttrs, fields: &[Field], errors: &mut Errors) {
    if let Some(state) = a.state.as_ref().and_then(|s| field(fields, &s.value)) {
        let ready = a.ready.iter().flat_map(|r| {
            let list = r.value.len() > 1;
            r.value.iter().map(move |e| (attrs::READY, list, e))
        });
        let others = [
            (attrs::CLAIMED, &a.claimed),
            (attrs::DONE, &a.done),
            (attrs::FAILED, &a.failed),
            (attrs::CANCELLED, &a.cancelled),
        ]
        .into_iter()
        .filter_map(|(key, v)| Some((key, false, &v.as_ref()?.value)));
        for (key, list, e) in ready.chain(others) {
            // A value that is not a literal is reported by `literal::check`.
            if let Ok(value) = literal::value(e) {
                if let Err(err) = state_value(key, list, &value, state) {
                    errors.push(err);
                }
            }
        }
    }
    // (column, key, whether it holds text, why it is NULL)
    let nullable = [
        (
            a.owner.as_ref().map(|o| &o.value),
            attrs::OWNER,
            true,
            "it stores the claiming worker's identity, and a row that is ready to be claimed has none: a claim sets it, and a release or a retry back to ready sets it to NULL",
        ),
        (
            a.claim_if_null.as_ref().map(|c| &c.value),
            attrs::CLAIM_IF_NULL,
            false,
            "the column is NULL until the first caller sets it, and `claim_if_null` sets it only while it is NULL",
        ),
        (
            a.job.as_ref().and_then(|j| j.value.holder.as_ref()),
            "job(holder = …)",
            true,
            "it stores who runs the job, and is NULL while no run holds it: `release_run` sets it back to NULL",
        ),
        (
            a.job.as_ref().and_then(|j| j.value.started_at.as_ref()),
            "job(started_at = …)",
            false,
            "a job that never ran has no start",
        ),
    ];
    for (column, key, text, why) in nullable {
        let Some(column) = column else { continue };
        if let Some(field) = field(fields, column) {
            if let Err(err) = nullable_field(key, column, text, field, why) {
                errors.push(err);
            }
        }
    }
}

/// A column the library writes NULL into (or reads as NULL) must be read into an `Option`, of
/// `String` when it holds `text`.
fn nullable_field(
    key: &str,
    column: &Ident,
    text: bool,
    field: &Field,
    why: &str,
) -> syn::Result<()> {
    let read = FieldType::of(&field.ty);
    let not_text = !matches!(read.kind, Kind::Text | Kind::Unknown);
    let wrong = read.is_not_optional() || (text && not_text);
    if !wrong {
        return Ok(());
    }
    let (name, ty) = (&field.ident, ty::text(&field.ty));
    let written = match key.strip_suffix(" = …)") {
        Some(open) => format!("{open} = {column})"),
        None => format!("{key} = {column}"),
    };
    let (what, inner, sql) = if text {
        ("a nullable text column", "String".to_owned(), "Text")
    } else {
        ("a nullable column", ty.clone(), "…")
    };
    Err(syn::Error::new(
        column.span(),
        format!("`{written}` must be {what}, but its field is `{name}: {ty}`\nnote: {why}\nhelp: make the field `{name}: Option<{inner}>` and the column `{column} -> Nullable<{sql}>` in `table!` (NULL-able in the database)"),
    ))
}

/// One state value against the state field.
fn state_value(key: &str, list: bool, v: &StateValue<'_>, state: &Field) -> syn::Result<()> {
    let field = FieldType::of(&state.ty);
    let (name, ty) = (&state.ident, ty::text(&state.ty));
    let lit = v.literal.text();
    let written = if list {
        format!("`{lit}` in `{key}(…)`")
    } else {
        format!("`{key} = {lit}`")
    };
    let fixed = |value: &str| {
        if list {
            format!("`{value}`")
        } else {
            format!("`{key} = {value}`")
        }
    };
    if let Some(e) = v.stringified {
        if !matches!(v.literal, Literal::Str(_)) {
            return Err(syn::Error::new_spanned(
                e,
                format!("`String::from` and `.to_string()` take a string literal here: the claim's SQL carries the literal itself, so `{lit}` would be compared as {}\nhelp: write the state as the column stores it: {} for a text column", describe(&v.literal), fixed(&format!("\"{lit}\""))),
            ));
        }
    }
    if field.is_not_optional() {
        if let Literal::Null(e) = v.literal {
            return Err(syn::Error::new_spanned(
                e,
                format!("{written} is SQL NULL, but the state field is `{name}: {ty}`, which cannot hold NULL\nhelp: make the field `{name}: Option<{ty}>` (and the column `Nullable<…>`), or give a state value"),
            ));
        }
        if let Some(e) = v.some {
            return Err(syn::Error::new_spanned(
                e,
                format!("{} is an `Option`, but the state field is `{name}: {ty}`\nhelp: write the value without `Some`: {}", if list { format!("`Some({lit})` in `{key}(…)`") } else { format!("`{key} = Some(…)`") }, fixed(&lit)),
            ));
        }
    }
    // `exact`: the value the user meant, written as the field's kind; else an example.
    let mismatch = |as_what: &str, value: String, exact: bool| {
        let help = if exact {
            format!("write it as {as_what}: {}", fixed(&value))
        } else {
            format!("a state of this field is {as_what}, e.g. {}", fixed(&value))
        };
        Err(syn::Error::new(
            v.literal.span(),
            format!(
                "{written} is {}, but the state field is `{name}: {ty}`\nhelp: {help}",
                describe(&v.literal),
            ),
        ))
    };
    match (field.kind, &v.literal) {
        (_, Literal::Null(_))
        | (Kind::Text, Literal::Str(_))
        | (Kind::Bool, Literal::Bool(_))
        | (Kind::OtherNotNull | Kind::Unknown, _) => Ok(()),
        (Kind::Text, _) => mismatch("a string", format!("\"{lit}\""), true),
        (Kind::Int(int), Literal::Int(n, _)) => {
            if (int.min..=int.max).contains(n) {
                return Ok(());
            }
            Err(syn::Error::new(
                v.literal.span(),
                format!("{written} does not fit in the state field `{name}: {}` ({} to {})\nhelp: write a state in that range, or widen the field and its column", int.name, int.min, int.max),
            ))
        }
        (Kind::Int(_), Literal::Str(s)) => match s.value().trim().parse::<i64>() {
            Ok(n) => mismatch("an integer", n.to_string(), true),
            Err(_) => mismatch("an integer", "0".to_owned(), false),
        },
        (Kind::Int(_), Literal::Bool(b)) => {
            mismatch("an integer", i32::from(b.value).to_string(), true)
        }
        (Kind::Bool, Literal::Str(s)) => match s.value().to_ascii_lowercase().as_str() {
            b @ ("true" | "false") => mismatch("a boolean", b.to_owned(), true),
            _ => mismatch("a boolean", "false".to_owned(), false),
        },
        (Kind::Bool, Literal::Int(n, _)) => match n {
            0 | 1 => mismatch("a boolean", (*n == 1).to_string(), true),
            _ => mismatch("a boolean", "false".to_owned(), false),
        },
    }
}

fn describe(literal: &Literal<'_>) -> &'static str {
    match literal {
        Literal::Null(_) => "NULL",
        Literal::Str(_) => "a string",
        Literal::Int(..) => "an integer",
        Literal::Bool(_) => "a boolean",
    }
}

/// Whether the derive decides every state value of a field of type `ty` itself (text, integer,
/// boolean, or an `Option` of one), so the expansion needs no type check of them.
pub(crate) fn decides_state_values(ty: &syn::Type) -> bool {
    matches!(
        FieldType::of(ty).kind,
        Kind::Text | Kind::Int(_) | Kind::Bool
    )
}
