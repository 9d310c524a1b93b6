//! Cross-attribute checks (thiserror's `valid.rs`): keys that need other keys, and columns that
//! must have a field. Each key's own value was checked while parsing (`attrs.rs`); here the keys
//! are checked against each other and against the struct, and every mistake is collected.

use proc_macro2::Span;
use syn::{DeriveInput, Ident};

use crate::attrs::{self, Capability, ClaimableAttrs, Errors, Spanned, StructAttrs};
use crate::fields::{field, primary_key, Field};

/// Checks the parsed attributes of `input` against each other and against its `fields`.
pub(crate) fn check(
    input: &DeriveInput,
    attrs: &StructAttrs,
    fields: &[Field],
    errors: &mut Errors,
) {
    let name = &input.ident;
    let a = &attrs.claimable;
    let capability = attrs.capability;
    if attrs.claimable_span.is_none() && capability != Capability::InsertOnce {
        errors.push(syn::Error::new(
            name.span(),
            if capability == Capability::Claim {
                "`#[derive(Claimable)]` needs a `#[claimable(...)]` attribute\nhelp: the correct format looks like `#[claimable(state = status, ready = \"new\", claimed = \"running\")]`".to_owned()
            } else {
                format!(
                    "`#[derive({})]` needs a `#[{}(...)]` attribute\nhelp: the correct format looks like `{}`",
                    capability.derive(),
                    capability.attr(),
                    attrs::format_help(match capability {
                        Capability::ClaimIfNull => attrs::CLAIM_IF_NULL,
                        Capability::JobLease => attrs::JOB,
                        _ => attrs::SEMAPHORE,
                    })
                )
            },
        ));
    }
    if a.needs_key() {
        check_primary_key(input, attrs, fields, errors);
    }
    // Reported only when nothing else is wrong: a key with a bad value was still asked for.
    if let (Some(span), Capability::Claim) = (attrs.claimable_span, capability) {
        if a.given.is_empty() && errors.is_empty() {
            errors.push(syn::Error::new(
                span,
                "`#[claimable(...)]` asks for nothing to generate\nhelp: give the state column and its states, e.g. `#[claimable(state = status, ready = \"new\", claimed = \"running\")]`; the other capabilities are derives of their own: `ClaimIfNull`, `InsertOnce`, `JobLease`, `ControlTable`",
            ));
        }
    }
    check_claim(a, fields, errors);
    crate::literal::check(a, errors);
    crate::fit::check(a, fields, errors);
}

/// Every primary-key column needs a field: claims, claim_if_null columns and job leases address rows by key.
fn check_primary_key(
    input: &DeriveInput,
    attrs: &StructAttrs,
    fields: &[Field],
    errors: &mut Errors,
) {
    let name = &input.ident;
    let pk_given = attrs.diesel.primary_key.is_some();
    for col in primary_key(input, &attrs.diesel) {
        if field(fields, &col).is_some() {
            continue;
        }
        errors.push(syn::Error::new(
            col.span(),
            if pk_given {
                format!("`{name}` has no field for primary key column `{col}`; diesel-lease addresses rows by their primary key\nhelp: add a field for `{col}` (or map one with `#[diesel(column_name = {col})]`)")
            } else {
                format!("`{name}` has no primary key field: Diesel's default key is `id` and there is no field `id`\nhelp: name the key column(s) as Diesel does, e.g. `#[diesel(primary_key(job_id))]`")
            },
        ));
    }
}

/// The claim keys: all of them need `state`; `state` needs `ready` and `claimed`; a timeout needs
/// `claimed_at`; `max_attempts` needs the columns and the state that retiring a claim uses.
fn check_claim(a: &ClaimableAttrs, fields: &[Field], errors: &mut Errors) {
    let given = |key: &str| a.given.contains(&key);
    let Some(state) = &a.state else {
        // When `state` was written with a bad value, that is already reported.
        if !given(attrs::STATE) {
            check_claim_keys_without_state(a, errors);
        }
        return;
    };
    let missing: Vec<(&str, &str)> = [
        (attrs::READY, "which states can be claimed"),
        (attrs::CLAIMED, "which state a claim moves the row to"),
    ]
    .into_iter()
    .filter(|(key, _)| !given(key))
    .collect();
    if !missing.is_empty() {
        let keys = missing
            .iter()
            .map(|(k, _)| format!("`{k}`"))
            .collect::<Vec<_>>()
            .join(" and ");
        let needs = missing
            .iter()
            .map(|(_, why)| *why)
            .collect::<Vec<_>>()
            .join(" and ");
        errors.push(syn::Error::new(
            state.span,
            format!("missing {keys}: a claim needs to know {needs}\nhelp: the correct format looks like `#[claimable(state = status, ready = \"new\", claimed = \"running\")]`"),
        ));
    }

    let columns = [
        (attrs::STATE, Some(state)),
        (attrs::OWNER, a.owner.as_ref()),
        (attrs::ATTEMPTS, a.attempts.as_ref()),
    ];
    for (key, col) in columns {
        if let Some(col) = col {
            check_field(key, col, fields, errors);
        }
    }

    if let (Some(p), true) = (&a.priority, given(attrs::ORDER_BY)) {
        errors.push(syn::Error::new(
            p.span,
            "`priority` and `order_by` both set the claim order\nhelp: give `priority = <column>` (higher first, then the not-before column, then the key), or put the column in `order_by(<column> desc, …)` yourself",
        ));
    }
    if let Some(t) = &a.timeout_ms {
        if !given(attrs::CLAIMED_AT) {
            errors.push(syn::Error::new(
                t.span,
                "a claim timeout needs `claimed_at`: the claim's age is measured on that column, by the database clock\nhelp: add `claimed_at = <timestamp column>`",
            ));
        } else if !given(attrs::OWNER) && !given(attrs::ATTEMPTS) {
            errors.push(syn::Error::new(
                t.span,
                "a claim timeout lets another worker rescue a stale claim, and nothing would stop the stale worker from completing it: map a column that fences each claim\nhelp: add `owner = <text column>` (each claim stores its own stamp there) or `attempts = <integer column>`",
            ));
        }
    }
    if let Some(m) = &a.max_attempts {
        let missing: Vec<&str> = [
            (attrs::ATTEMPTS, given(attrs::ATTEMPTS)),
            (attrs::CLAIMED_AT, given(attrs::CLAIMED_AT)),
            (
                "timeout_secs",
                given(attrs::TIMEOUT_SECS) || given(attrs::TIMEOUT_MS),
            ),
            (attrs::FAILED, given(attrs::FAILED)),
        ]
        .into_iter()
        .filter(|(_, present)| !present)
        .map(|(k, _)| k)
        .collect();
        if !missing.is_empty() {
            errors.push(syn::Error::new(
                m.span,
                format!("`max_attempts` also needs {}: exhausted stale claims are moved to the failed state\nhelp: the correct format looks like `#[claimable(attempts = attempts, claimed_at = claimed_at, timeout_secs = 300, max_attempts = 5, failed = \"failed\")]`",
                    missing.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")),
            ));
        }
    }
}

/// Every claim key given without `state`, reported at the key.
fn check_claim_keys_without_state(a: &ClaimableAttrs, errors: &mut Errors) {
    let claim_only: [(&str, Option<Span>); 15] = [
        (attrs::READY, a.ready.as_ref().map(|s| s.span)),
        (attrs::CLAIMED, a.claimed.as_ref().map(|s| s.span)),
        (attrs::DONE, a.done.as_ref().map(|s| s.span)),
        (attrs::FAILED, a.failed.as_ref().map(|s| s.span)),
        (attrs::OWNER, a.owner.as_ref().map(|s| s.span)),
        (attrs::CLAIMED_AT, a.claimed_at.as_ref().map(|s| s.span)),
        (attrs::ATTEMPTS, a.attempts.as_ref().map(|s| s.span)),
        (attrs::MAX_ATTEMPTS, a.max_attempts.as_ref().map(|s| s.span)),
        (a.timeout_key, a.timeout_ms.as_ref().map(|s| s.span)),
        (attrs::ORDER_BY, a.order_by.as_ref().map(|s| s.span)),
        (attrs::AVAILABLE_AT, a.available_at.as_ref().map(|s| s.span)),
        (attrs::ERROR, a.error.as_ref().map(|s| s.span)),
        (attrs::PRIORITY, a.priority.as_ref().map(|s| s.span)),
        (attrs::CANCELLED, a.cancelled.as_ref().map(|s| s.span)),
        (attrs::PAUSABLE, a.pausable.as_ref().map(|s| s.span)),
    ];
    for (key, span) in claim_only {
        if let Some(span) = span {
            errors.push(syn::Error::new(
                span,
                format!("`{key}` configures claims, which need the state column\nhelp: add `state = <column>`, e.g. `#[claimable(state = status, ready = \"new\", claimed = \"running\")]`"),
            ));
        }
    }
}

/// A column whose value a generated method reads from `self` must have a field.
fn check_field(key: &str, col: &Spanned<Ident>, fields: &[Field], errors: &mut Errors) {
    if field(fields, &col.value).is_none() {
        errors.push(syn::Error::new(
            col.value.span(),
            format!("`{key} = {}` must name a field of the struct (its column), so completion can read it\nhelp: add the field, or map it with `#[diesel(column_name = {})]`", col.value, col.value),
        ));
    }
}
