//! The annotated struct as the derive sees it: table, key, fields, and the validated settings.

use proc_macro2::Span;
use syn::spanned::Spanned as _;
use syn::{Data, DeriveInput, Expr, Fields, Ident, Path, Type};

use crate::attrs::{self, ClaimableAttrs, DieselStructAttrs, Errors, OrderItem, Spanned};

/// A struct field and the column it maps to.
pub(crate) struct Field {
    pub(crate) ident: Ident,
    pub(crate) column: Ident,
    pub(crate) ty: Type,
}

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
    pub(crate) max_attempts: Option<u32>,
    pub(crate) timeout_ms: Option<u64>,
    pub(crate) order_by: Vec<OrderItem>,
}

/// Everything the expansion needs.
pub(crate) struct Model {
    pub(crate) name: Ident,
    pub(crate) generics: syn::Generics,
    pub(crate) table: Path,
    /// (column, field) of each primary-key part.
    pub(crate) pk: Vec<(Ident, Field)>,
    pub(crate) claim: Option<Claim>,
    pub(crate) guard: Option<Ident>,
    pub(crate) insert_once: Option<Option<Path>>,
    pub(crate) job: Option<attrs::JobAttrs>,
}

impl Model {
    pub(crate) fn from_input(input: &DeriveInput) -> syn::Result<Model> {
        let mut errors = Errors::default();
        let fields = struct_fields(input)?;

        let mut claimable = ClaimableAttrs::default();
        let mut diesel = DieselStructAttrs::default();
        let mut seen_claimable = None;
        for attr in &input.attrs {
            if attr.path().is_ident("claimable") {
                seen_claimable.get_or_insert(attr.meta.span());
                claimable.parse(attr, &mut errors);
            } else if attr.path().is_ident("diesel") {
                if let Err(e) = diesel.parse(attr) {
                    errors.push(e);
                }
            }
        }
        if seen_claimable.is_none() {
            errors.push(syn::Error::new(
                input.ident.span(),
                "`#[derive(Claimable)]` needs a `#[claimable(...)]` attribute\nhelp: the correct format looks like `#[claimable(state = status, ready = \"new\", claimed = \"running\")]`",
            ));
        }
        let find = |column: &Ident| fields.iter().find(|f| f.column == *column);

        let table = diesel.table_name.clone().unwrap_or_else(|| {
            let snake = to_snake_case(&input.ident.to_string());
            Path::from(Ident::new(&format!("{snake}s"), input.ident.span()))
        });
        let pk_given = diesel.primary_key.is_some();
        let pk_cols = diesel
            .primary_key
            .clone()
            .unwrap_or_else(|| vec![Ident::new("id", input.ident.span())]);
        // Claims, guards and job leases address rows by primary key; insert_once needs none
        // (an insertable usually leaves its key to the database).
        let needs_key =
            claimable.state.is_some() || claimable.guard.is_some() || claimable.job.is_some();
        let mut pk = Vec::new();
        for col in pk_cols.into_iter().filter(|_| needs_key) {
            match find(&col) {
                Some(f) => pk.push((
                    col,
                    Field {
                        ident: f.ident.clone(),
                        column: f.column.clone(),
                        ty: f.ty.clone(),
                    },
                )),
                None => errors.push(syn::Error::new(
                    col.span(),
                    if pk_given {
                        format!("`{}` has no field for primary key column `{col}`; diesel-lease addresses rows by their primary key\nhelp: add a field for `{col}` (or map one with `#[diesel(column_name = {col})]`)", input.ident)
                    } else {
                        format!("`{}` has no primary key field: Diesel's default key is `id` and there is no field `id`\nhelp: name the key column(s) as Diesel does, e.g. `#[diesel(primary_key(job_id))]`", input.ident)
                    },
                )),
            }
        }

        // Reported only when nothing else is wrong: a key with a bad value was still asked for.
        if let Some(span) = seen_claimable {
            if claimable.given.is_empty() && errors.is_empty() {
                errors.push(syn::Error::new(
                    span,
                    "`#[claimable(...)]` asks for nothing to generate\nhelp: give `state = …` (claims), `guard = …` (claim_if_null), `insert_once` or `job(…)` (job leases), e.g. `#[claimable(guard = notified)]`",
                ));
            }
        }
        let claim = claim_settings(&claimable, &find, &mut errors);
        let guard = claimable.guard.as_ref().map(|g| g.value.clone());
        let insert_once = claimable.insert_once.as_ref().map(|i| i.value.clone());
        let job = claimable.job.as_ref().map(|j| j.value.clone());
        errors.finish()?;
        Ok(Model {
            name: input.ident.clone(),
            generics: input.generics.clone(),
            table,
            pk,
            claim,
            guard,
            insert_once,
            job,
        })
    }
}

fn claim_settings<'f>(
    a: &ClaimableAttrs,
    find: &dyn Fn(&Ident) -> Option<&'f Field>,
    errors: &mut Errors,
) -> Option<Claim> {
    let claim_only: [(&str, Option<Span>); 10] = [
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
    ];
    let given = |key: &str| a.given.contains(&key);
    let Some(state) = &a.state else {
        if given(attrs::STATE) {
            // `state` was written with a bad value, already reported.
            return None;
        }
        for (key, span) in claim_only {
            if let Some(span) = span {
                errors.push(syn::Error::new(
                    span,
                    format!("`{key}` configures claims, which need the state column\nhelp: add `state = <column>`, e.g. `#[claimable(state = status, ready = \"new\", claimed = \"running\")]`"),
                ));
            }
        }
        return None;
    };
    let mut ok = a.ready.is_some() && a.claimed.is_some();
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
        ok = false;
    }

    let field_of = |key: &str, col: &Spanned<Ident>, errors: &mut Errors| -> Option<&'f Field> {
        let f = find(&col.value);
        if f.is_none() {
            errors.push(syn::Error::new(
                col.value.span(),
                format!("`{key} = {}` must name a field of the struct (its column), so completion can read it\nhelp: add the field, or map it with `#[diesel(column_name = {})]`", col.value, col.value),
            ));
        }
        f
    };
    let state_field = field_of(attrs::STATE, state, errors);
    let owner = a.owner.as_ref().and_then(|o| {
        field_of(attrs::OWNER, o, errors).map(|f| (o.value.clone(), f.ident.clone()))
    });
    let attempts = a.attempts.as_ref().and_then(|o| {
        field_of(attrs::ATTEMPTS, o, errors).map(|f| (o.value.clone(), f.ident.clone()))
    });

    if let Some(t) = &a.timeout_ms {
        if !given(attrs::CLAIMED_AT) {
            errors.push(syn::Error::new(
                t.span,
                "a claim timeout needs `claimed_at`: the claim's age is measured on that column, by the database clock\nhelp: add `claimed_at = <timestamp column>`",
            ));
            ok = false;
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
            ok = false;
        }
    }
    let state_field = state_field?;
    if !ok {
        return None;
    }
    Some(Claim {
        state: state.value.clone(),
        state_ty: state_field.ty.clone(),
        ready: a
            .ready
            .as_ref()
            .map(|r| r.value.clone())
            .unwrap_or_default(),
        claimed: a.claimed.as_ref().map(|c| c.value.clone())?,
        done: a.done.as_ref().map(|d| d.value.clone()),
        failed: a.failed.as_ref().map(|d| d.value.clone()),
        owner,
        claimed_at: a.claimed_at.as_ref().map(|c| c.value.clone()),
        attempts,
        max_attempts: a.max_attempts.as_ref().map(|m| m.value),
        timeout_ms: a.timeout_ms.as_ref().map(|t| t.value),
        order_by: a
            .order_by
            .as_ref()
            .map(|o| o.value.clone())
            .unwrap_or_default(),
    })
}

fn struct_fields(input: &DeriveInput) -> syn::Result<Vec<Field>> {
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new(
            input.ident.span(),
            "`#[derive(Claimable)]` works on structs with named fields (Diesel models)\nhelp: derive it on the struct that maps the table's rows, next to `Queryable` and `Selectable`",
        ));
    };
    let Fields::Named(named) = &data.fields else {
        return Err(syn::Error::new(
            input.ident.span(),
            "`#[derive(Claimable)]` needs named fields, as Diesel's `Selectable` does\nhelp: name the fields after the table's columns, e.g. `struct Job { id: i64, status: String }`",
        ));
    };
    let mut fields = Vec::new();
    for f in &named.named {
        let ident = f
            .ident
            .clone()
            .ok_or_else(|| syn::Error::new(input.ident.span(), "unnamed field"))?;
        let mut column = ident.clone();
        for attr in f.attrs.iter().filter(|a| a.path().is_ident("diesel")) {
            if let Some(c) = attrs::diesel_column_name(attr)? {
                column = c;
            }
        }
        fields.push(Field {
            ident,
            column,
            ty: f.ty.clone(),
        });
    }
    Ok(fields)
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
