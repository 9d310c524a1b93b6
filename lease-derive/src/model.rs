//! The annotated struct as the derive sees it: table, key, fields, and the settings, built once
//! `valid.rs` found nothing wrong.

use syn::{DeriveInput, Expr, Ident, Path, Type};

use crate::attrs::{
    self, Capability, ClaimableAttrs, DieselStructAttrs, Errors, OrderItem, Spanned, StructAttrs,
};
use crate::fields::{field, primary_key, struct_fields, Field};
use crate::valid;

/// The claim settings, present when `state` is given.
pub(crate) struct Claim {
    pub(crate) state: Ident,
    pub(crate) state_ty: Type,
    pub(crate) ready: Vec<Expr>,
    pub(crate) claimed: Expr,
    pub(crate) done: Option<Expr>,
    pub(crate) failed: Option<Expr>,
    /// (column, field) of the owner.
    pub(crate) owner: Option<(Ident, Ident)>,
    pub(crate) claimed_at: Option<Ident>,
    pub(crate) attempts: Option<(Ident, Ident)>,
    /// The attempts field's type: whether it may read a NULL decides the claim's increment.
    pub(crate) attempts_ty: Option<Type>,
    pub(crate) max_attempts: Option<u32>,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) order_by: Vec<OrderItem>,
    pub(crate) available_at: Option<Ident>,
    pub(crate) error: Option<Ident>,
    /// The priority column (higher first).
    pub(crate) priority: Option<Ident>,
    /// The state cancelled rows go to.
    pub(crate) cancelled: Option<Expr>,
    /// `pausable`: `Some(None)`, `pausable(key = col)`: `Some(Some(col))`.
    pub(crate) pausable: Option<Option<Ident>>,
    /// (column, field) of the claim order's first column, when the struct has a field for it:
    /// what a `ClaimCursor` resumes from.
    pub(crate) order_key: Option<(Ident, Field)>,
}

/// Everything the expansion needs.
pub(crate) struct Model {
    pub(crate) name: Ident,
    pub(crate) generics: syn::Generics,
    pub(crate) table: Path,
    /// (column, field) of each primary-key part.
    pub(crate) pk: Vec<(Ident, Field)>,
    /// Whether this derive implements `Keyed` (see [`Capability::implements_key`]).
    pub(crate) keyed: bool,
    pub(crate) claim: Option<Claim>,
    pub(crate) claim_if_null: Option<Ident>,
    pub(crate) insert_once: Option<Option<Path>>,
    pub(crate) job: Option<attrs::JobAttrs>,
    pub(crate) semaphore: Option<attrs::SemaphoreAttrs>,
}

impl Model {
    /// Reads the struct and its attributes, checks them (`valid.rs`) and, when nothing is wrong,
    /// builds the model. Every error is reported at once.
    pub(crate) fn from_input(input: &DeriveInput, capability: Capability) -> syn::Result<Model> {
        let fields = struct_fields(input)?;
        let mut errors = Errors::default();
        let attrs = StructAttrs::parse(&input.attrs, capability, &mut errors);
        valid::check(input, &attrs, &fields, &mut errors);
        errors.finish()?;

        let StructAttrs {
            claimable, diesel, ..
        } = &attrs;
        let pk: Vec<(Ident, Field)> = primary_key(input, diesel)
            .into_iter()
            .filter(|_| claimable.needs_key())
            .filter_map(|col| {
                let f = field(&fields, &col)?.clone();
                Some((col, f))
            })
            .collect();
        let mut claim = claim_settings(claimable, &fields);
        if let Some(c) = claim.as_mut() {
            c.order_key = first_order_column(c, &pk)
                .and_then(|col| field(&fields, &col).map(|f| (col, f.clone())));
        }
        Ok(Model {
            name: input.ident.clone(),
            generics: input.generics.clone(),
            table: table_path(input, diesel),
            pk,
            keyed: capability.implements_key(&attrs.present),
            claim,
            claim_if_null: claimable.claim_if_null.as_ref().map(|g| g.value.clone()),
            insert_once: claimable.insert_once.as_ref().map(|i| i.value.clone()),
            job: claimable.job.as_ref().map(|j| j.value.clone()),
            semaphore: claimable.semaphore.as_ref().map(|s| s.value.clone()),
        })
    }
}

impl Model {
    /// What the fallback after an error builds on: the name, the table and the key when every
    /// key column has a field (else none), and no capability.
    pub(crate) fn skeleton(input: &DeriveInput, attrs: &StructAttrs) -> Model {
        let fields = struct_fields(input).unwrap_or_default();
        let pk = primary_key(input, &attrs.diesel)
            .into_iter()
            .map(|col| field(&fields, &col).map(|f| (col, f.clone())))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
        Model {
            name: input.ident.clone(),
            generics: input.generics.clone(),
            table: table_path(input, &attrs.diesel),
            pk,
            // A derive without its attribute is not in `present`, so another derive on the model
            // may implement `Keyed` too: it leaves the key to that one.
            keyed: attrs.capability.implements_key(&attrs.present)
                && (attrs.claimable_span.is_some()
                    || !attrs
                        .present
                        .iter()
                        .any(|c| c.needs_key() && *c != attrs.capability)),
            claim: None,
            claim_if_null: None,
            insert_once: None,
            job: None,
            semaphore: None,
        }
    }
}

/// The model's Diesel table: `#[diesel(table_name = …)]`, else Diesel's default (the struct's
/// name in snake case, plus `s`).
fn table_path(input: &DeriveInput, diesel: &DieselStructAttrs) -> Path {
    diesel.table_name.clone().unwrap_or_else(|| {
        let snake = to_snake_case(&input.ident.to_string());
        Path::from(Ident::new(&format!("{snake}s"), input.ident.span()))
    })
}

/// The claim settings of checked attributes: `None` when no `state` is given.
fn claim_settings(a: &ClaimableAttrs, fields: &[Field]) -> Option<Claim> {
    let state = a.state.as_ref()?;
    let field_of = |col: &Spanned<Ident>| {
        field(fields, &col.value).map(|f| (col.value.clone(), f.ident.clone()))
    };
    Some(Claim {
        state: state.value.clone(),
        state_ty: field(fields, &state.value)?.ty.clone(),
        ready: a
            .ready
            .as_ref()
            .map(|r| r.value.clone())
            .unwrap_or_default(),
        claimed: a.claimed.as_ref().map(|c| c.value.clone())?,
        done: a.done.as_ref().map(|d| d.value.clone()),
        failed: a.failed.as_ref().map(|d| d.value.clone()),
        owner: a.owner.as_ref().and_then(field_of),
        claimed_at: a.claimed_at.as_ref().map(|c| c.value.clone()),
        attempts: a.attempts.as_ref().and_then(field_of),
        attempts_ty: a
            .attempts
            .as_ref()
            .and_then(|c| field(fields, &c.value))
            .map(|f| f.ty.clone()),
        max_attempts: a.max_attempts.as_ref().map(|m| m.value),
        timeout_ms: a.timeout_ms.as_ref().map(|t| t.value),
        order_by: a
            .order_by
            .as_ref()
            .map(|o| o.value.clone())
            .unwrap_or_default(),
        available_at: a.available_at.as_ref().map(|c| c.value.clone()),
        error: a.error.as_ref().map(|c| c.value.clone()),
        priority: a.priority.as_ref().map(|c| c.value.clone()),
        cancelled: a.cancelled.as_ref().map(|d| d.value.clone()),
        pausable: a.pausable.as_ref().map(|p| p.value.clone()),
        order_key: None,
    })
}

/// The first column of the claim order: of `order_by(…)`, else of the default order (the
/// priority, the not-before column, the key; see `expand_claim`).
fn first_order_column(c: &Claim, pk: &[(Ident, Field)]) -> Option<Ident> {
    match c.order_by.first() {
        Some(o) => Some(o.column.clone()),
        None => c
            .priority
            .clone()
            .or_else(|| c.available_at.clone())
            .or_else(|| pk.first().map(|(col, _)| col.clone())),
    }
}

/// `ImportJob` → `import_job` (Diesel's default table name adds an `s`).
fn to_snake_case(s: &str) -> String {
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
