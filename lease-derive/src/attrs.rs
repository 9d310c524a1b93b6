//! Parsing the derives' attributes (`#[claimable(...)]`, `#[claim_if_null(...)]`,
//! `#[insert_once(...)]`, `#[job_lease(...)]`, `#[control_table(...)]`) and the parts of
//! `#[diesel(...)]` they read.

use proc_macro2::Span;
use syn::meta::ParseNestedMeta;
use syn::spanned::Spanned as _;
use syn::{Expr, Ident, LitInt, Path, Token};

/// Every key `#[claimable(...)]` accepts, for the "expected one of" message.
pub(crate) const KEYS: &[&str] = &[
    STATE,
    READY,
    CLAIMED,
    DONE,
    FAILED,
    OWNER,
    CLAIMED_AT,
    ATTEMPTS,
    MAX_ATTEMPTS,
    TIMEOUT_SECS,
    TIMEOUT_MS,
    ORDER_BY,
    AVAILABLE_AT,
    ERROR,
    CLAIM_IF_NULL,
    INSERT_ONCE,
    JOB,
    SEMAPHORE,
    PRIORITY,
    CANCELLED,
    PAUSABLE,
];
pub(crate) const STATE: &str = "state";
pub(crate) const READY: &str = "ready";
pub(crate) const CLAIMED: &str = "claimed";
pub(crate) const DONE: &str = "done";
pub(crate) const FAILED: &str = "failed";
pub(crate) const OWNER: &str = "owner";
pub(crate) const CLAIMED_AT: &str = "claimed_at";
pub(crate) const ATTEMPTS: &str = "attempts";
pub(crate) const MAX_ATTEMPTS: &str = "max_attempts";
pub(crate) const TIMEOUT_SECS: &str = "timeout_secs";

/// The longest claim timeout, in milliseconds: `lease_core::MAX_TTL` (1000 years), which every
/// ttl and timeout at run time is checked against (a test in diesel-lease keeps the two equal).
pub(crate) const MAX_TIMEOUT_MS: u64 = 1_000 * 365 * 24 * 60 * 60 * 1_000;
pub(crate) const TIMEOUT_MS: &str = "timeout_ms";
pub(crate) const ORDER_BY: &str = "order_by";
pub(crate) const AVAILABLE_AT: &str = "available_at";
pub(crate) const ERROR: &str = "error";
pub(crate) const CLAIM_IF_NULL: &str = "claim_if_null";
pub(crate) const INSERT_ONCE: &str = "insert_once";
pub(crate) const RETURNING: &str = "returning";
pub(crate) const JOB: &str = "job";
pub(crate) const HOLDER: &str = "holder";
pub(crate) const STARTED_AT: &str = "started_at";
pub(crate) const NEXT_RUN: &str = "next_run";
pub(crate) const SEMAPHORE: &str = "semaphore";
pub(crate) const PRIORITY: &str = "priority";
pub(crate) const CANCELLED: &str = "cancelled";
pub(crate) const PAUSABLE: &str = "pausable";

/// What one derive implements: each capability is a derive of its own, with an attribute of its
/// own, as Diesel's `Insertable` and `AsChangeset` are.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Capability {
    /// `#[derive(Claimable)]`, `#[claimable(state = …, …)]`: claims of rows.
    Claim,
    /// `#[derive(ClaimIfNull)]`, `#[claim_if_null(column = …)]`.
    ClaimIfNull,
    /// `#[derive(InsertOnce)]`, optionally `#[insert_once(returning = …)]`.
    InsertOnce,
    /// `#[derive(JobLease)]`, `#[job_lease(holder = …, started_at = …, next_run = …)]`.
    JobLease,
    /// `#[derive(ControlTable)]`, `#[control_table(ticket = …, owner = …, …)]`.
    ControlTable,
}

impl Capability {
    pub(crate) const ALL: [Capability; 5] = [
        Capability::Claim,
        Capability::ClaimIfNull,
        Capability::InsertOnce,
        Capability::JobLease,
        Capability::ControlTable,
    ];

    /// The derive's own attribute.
    pub(crate) fn attr(self) -> &'static str {
        match self {
            Capability::Claim => "claimable",
            Capability::ClaimIfNull => CLAIM_IF_NULL,
            Capability::InsertOnce => INSERT_ONCE,
            Capability::JobLease => "job_lease",
            Capability::ControlTable => "control_table",
        }
    }

    /// The derive's name.
    pub(crate) fn derive(self) -> &'static str {
        match self {
            Capability::Claim => "Claimable",
            Capability::ClaimIfNull => "ClaimIfNull",
            Capability::InsertOnce => "InsertOnce",
            Capability::JobLease => "JobLease",
            Capability::ControlTable => "ControlTable",
        }
    }

    /// The key the capability is read as (it was a key of `#[claimable(...)]` before it was a
    /// derive of its own): one grammar and one set of checks for both spellings.
    fn key(self) -> &'static str {
        match self {
            Capability::Claim => STATE,
            Capability::ClaimIfNull => CLAIM_IF_NULL,
            Capability::InsertOnce => INSERT_ONCE,
            Capability::JobLease => JOB,
            Capability::ControlTable => SEMAPHORE,
        }
    }

    /// Whether its operations address rows by primary key, through `Keyed`.
    pub(crate) fn needs_key(self) -> bool {
        matches!(
            self,
            Capability::Claim | Capability::ClaimIfNull | Capability::JobLease
        )
    }

    /// Whether this derive implements `Keyed`: the first capability on the struct that needs a
    /// key does (in the order of [`Capability::ALL`]), so that two derives on one model never
    /// implement it twice.
    pub(crate) fn implements_key(self, present: &[Capability]) -> bool {
        self.needs_key()
            && !Capability::ALL
                .iter()
                .take_while(|c| **c != self)
                .any(|c| c.needs_key() && present.contains(c))
    }
}

/// `semaphore(ticket = …, owner = …, resource = …, mode = …, shared = "…", exclusive = "…",
/// granted = …, expires_at = …)`: a semaphore's control table.
#[derive(Clone)]
pub(crate) struct SemaphoreAttrs {
    pub(crate) ticket: Ident,
    pub(crate) owner: Ident,
    pub(crate) resource: Option<Ident>,
    /// The access-type column with its shared and exclusive values.
    pub(crate) mode: Option<(Ident, syn::LitStr, syn::LitStr)>,
    pub(crate) granted: Ident,
    pub(crate) expires_at: Ident,
}

/// `job(holder = …, started_at = …, next_run = …)`: a scheduled job's lease columns.
#[derive(Clone)]
pub(crate) struct JobAttrs {
    pub(crate) holder: Option<Ident>,
    pub(crate) started_at: Option<Ident>,
    pub(crate) next_run: Option<Ident>,
}

/// A value with the span of the key that set it, for errors that point at the attribute.
#[derive(Clone)]
pub(crate) struct Spanned<T> {
    pub(crate) value: T,
    pub(crate) span: Span,
}

/// One `ORDER BY` entry: a column and its direction.
#[derive(Clone)]
pub(crate) struct OrderItem {
    pub(crate) column: Ident,
    pub(crate) desc: bool,
}

/// Everything `#[claimable(...)]` said, before cross-checks.
#[derive(Default)]
pub(crate) struct ClaimableAttrs {
    pub(crate) state: Option<Spanned<Ident>>,
    pub(crate) ready: Option<Spanned<Vec<Expr>>>,
    pub(crate) claimed: Option<Spanned<Expr>>,
    pub(crate) done: Option<Spanned<Expr>>,
    pub(crate) failed: Option<Spanned<Expr>>,
    pub(crate) owner: Option<Spanned<Ident>>,
    pub(crate) claimed_at: Option<Spanned<Ident>>,
    pub(crate) attempts: Option<Spanned<Ident>>,
    pub(crate) max_attempts: Option<Spanned<u32>>,
    /// Stale-claim timeout in milliseconds.
    pub(crate) timeout_ms: Option<Spanned<u64>>,
    pub(crate) order_by: Option<Spanned<Vec<OrderItem>>>,
    /// The not-before column.
    pub(crate) available_at: Option<Spanned<Ident>>,
    /// The last-error column.
    pub(crate) error: Option<Spanned<Ident>>,
    pub(crate) claim_if_null: Option<Spanned<Ident>>,
    /// `insert_once`, optionally `insert_once(returning = Model)`.
    pub(crate) insert_once: Option<Spanned<Option<Path>>>,
    pub(crate) job: Option<Spanned<JobAttrs>>,
    pub(crate) semaphore: Option<Spanned<SemaphoreAttrs>>,
    /// The priority column: higher first, ahead of the default claim order.
    pub(crate) priority: Option<Spanned<Ident>>,
    /// The state a cancelled row goes to.
    pub(crate) cancelled: Option<Spanned<Expr>>,
    /// `pausable`, or `pausable(key = column)`: claims skip paused rows.
    pub(crate) pausable: Option<Spanned<Option<Ident>>>,
    /// Which of `timeout_secs` / `timeout_ms` set `timeout_ms`, for messages.
    pub(crate) timeout_key: &'static str,
    /// Every known key that was written, even with an invalid value: checks that ask "was `x`
    /// given?" use this, so one bad value is not reported again as a missing key.
    pub(crate) given: Vec<&'static str>,
    /// While a capability's own attribute is read as its key (`#[job_lease(…)]` as `job(…)`):
    /// outside of it, the capability keys in `#[claimable(...)]` are errors.
    capability_key: bool,
}

impl ClaimableAttrs {
    /// Claims, claim_if_null columns and job leases address rows by primary key; `insert_once` needs none (an
    /// insertable usually leaves its key to the database).
    pub(crate) fn needs_key(&self) -> bool {
        self.state.is_some() || self.claim_if_null.is_some() || self.job.is_some()
    }
}

/// One derive's attributes on the struct: its own attribute (`#[claimable(...)]` for
/// `Claimable`, `#[job_lease(...)]` for `JobLease`, …), read into [`ClaimableAttrs`], and what
/// it reads of `#[diesel(...)]`.
pub(crate) struct StructAttrs {
    pub(crate) claimable: ClaimableAttrs,
    pub(crate) diesel: DieselStructAttrs,
    /// The first attribute of this derive, `None` when the struct has none.
    pub(crate) claimable_span: Option<Span>,
    /// The derive these attributes are for.
    pub(crate) capability: Capability,
    /// Every capability whose attribute the struct carries (so whose derive it has).
    pub(crate) present: Vec<Capability>,
}

impl StructAttrs {
    /// Parses the attributes of the derive of `capability`, collecting errors in `errors`; the
    /// other derives' attributes are only noted as present.
    pub(crate) fn parse(
        attrs: &[syn::Attribute],
        capability: Capability,
        errors: &mut Errors,
    ) -> StructAttrs {
        let mut out = StructAttrs {
            claimable: ClaimableAttrs::default(),
            diesel: DieselStructAttrs::default(),
            claimable_span: None,
            capability,
            present: Vec::new(),
        };
        for attr in attrs {
            if attr.path().is_ident("diesel") {
                if let Err(e) = out.diesel.parse(attr) {
                    errors.push(e);
                }
                continue;
            }
            let Some(found) = Capability::ALL
                .into_iter()
                .find(|c| attr.path().is_ident(c.attr()))
            else {
                continue;
            };
            if !out.present.contains(&found) {
                out.present.push(found);
            }
            if found != capability {
                continue;
            }
            out.claimable_span.get_or_insert(attr.meta.span());
            if capability == Capability::Claim {
                out.claimable.parse(attr, errors);
            } else {
                out.claimable.parse_capability(attr, capability, errors);
            }
        }
        // `#[derive(InsertOnce)]` alone is a follow-up insert without a returned row.
        if capability == Capability::InsertOnce && out.claimable_span.is_none() {
            out.claimable.insert_once = Some(Spanned {
                value: None,
                span: Span::call_site(),
            });
            out.claimable.given.push(INSERT_ONCE);
        }
        out
    }
}

/// Collects errors so that every mistake is reported at once (serde's `Ctxt`).
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, e: syn::Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    pub(crate) fn finish(self) -> syn::Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

fn set<T>(slot: &mut Option<Spanned<T>>, key: &Ident, value: T) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(
            key.span(),
            format!("duplicate `{key}` attribute\nhelp: give `{key}` once"),
        ));
    }
    *slot = Some(Spanned {
        value,
        span: key.span(),
    });
    Ok(())
}

pub(crate) fn format_help(key: &str) -> &'static str {
    match key {
        STATE => "#[claimable(state = status)]",
        READY => "#[claimable(ready = \"new\")]` or `#[claimable(ready(\"new\", \"retry\"))]",
        CLAIMED => "#[claimable(claimed = \"running\")]",
        DONE => "#[claimable(done = \"done\")]",
        FAILED => "#[claimable(failed = \"failed\")]",
        OWNER => "#[claimable(owner = claimed_by)]",
        CLAIMED_AT => "#[claimable(claimed_at = claimed_at)]",
        ATTEMPTS => "#[claimable(attempts = attempts)]",
        MAX_ATTEMPTS => "#[claimable(max_attempts = 5)]",
        TIMEOUT_SECS => "#[claimable(timeout_secs = 300)]",
        TIMEOUT_MS => "#[claimable(timeout_ms = 1500)]",
        ORDER_BY => "#[claimable(order_by(priority desc, id))]",
        AVAILABLE_AT => "#[claimable(available_at = run_at)]",
        ERROR => "#[claimable(error = last_error)]",
        CLAIM_IF_NULL => "#[derive(ClaimIfNull)] #[claim_if_null(column = notified)]",
        JOB => "#[derive(JobLease)] #[job_lease(holder = running_at, started_at = last_run_started, next_run = next_run)]",
        PRIORITY => "#[claimable(priority = priority)]",
        CANCELLED => "#[claimable(cancelled = \"cancelled\")]",
        PAUSABLE => "#[claimable(pausable)]` or `#[claimable(pausable(key = tenant))]",
        SEMAPHORE => "#[derive(ControlTable)] #[control_table(ticket = queue_position, owner = requesting_id, resource = resource, mode = access_type, shared = \"R\", exclusive = \"W\")]",
        _ => "#[derive(InsertOnce)]`, or with the row it returns `#[derive(InsertOnce)] #[insert_once(returning = Model)]",
    }
}

/// Adds the key's format to a syntax error, keeping the error's span (the offending token).
fn with_help(key: &str, e: syn::Error) -> syn::Error {
    syn::Error::new(
        e.span(),
        format!(
            "{e}\nhelp: the correct format looks like `{}`",
            format_help(key)
        ),
    )
}

/// After a mistake in one key's value, skips to the next `,` so that the mistake is reported
/// once rather than again as "expected `,`".
fn skip_to_next_key(input: syn::parse::ParseStream<'_>) {
    while !input.is_empty() && !input.peek(Token![,]) {
        if input.parse::<proc_macro2::TokenTree>().is_err() {
            break;
        }
    }
}

/// Parses `key(a = …, b …)` like `parse_nested_meta`, but a mistake in one entry is reported
/// once and the following entries are still read (no "expected `)`" after it).
fn nested(
    meta: &ParseNestedMeta<'_>,
    mut entry: impl FnMut(&ParseNestedMeta<'_>) -> syn::Result<()>,
) -> syn::Result<()> {
    let mut errors = Errors::default();
    meta.parse_nested_meta(|inner| {
        if let Err(e) = entry(&inner) {
            errors.push(e);
            skip_to_next_key(inner.input);
        }
        Ok(())
    })?;
    errors.finish()
}

/// The value of a key that names a column: `state = status`.
fn column_value(meta: &ParseNestedMeta<'_>, key: &str) -> syn::Result<Ident> {
    let input = meta.value().map_err(|e| with_help(key, e))?;
    if input.peek(syn::LitStr) {
        let lit: syn::LitStr = input.parse()?;
        let written = path_text(&meta.path);
        return Err(syn::Error::new(
            lit.span(),
            format!(
                "`{written}` takes a column name, not a string\nhelp: write the column without quotes: `{written} = {}`",
                lit.value()
            ),
        ));
    }
    input.parse::<Ident>().map_err(|e| {
        with_help(
            key,
            syn::Error::new(e.span(), "expected a column name (an identifier)"),
        )
    })
}

impl ClaimableAttrs {
    /// Parses one `#[claimable(...)]` attribute into `self`, collecting errors in `errors`.
    pub(crate) fn parse(&mut self, attr: &syn::Attribute, errors: &mut Errors) {
        if !matches!(attr.meta, syn::Meta::List(_)) {
            errors.push(syn::Error::new_spanned(
                &attr.meta,
                "`claimable` takes its keys in parentheses\nhelp: the correct format looks like `#[claimable(state = status, ready = \"new\", claimed = \"running\")]`",
            ));
            return;
        }
        let result = attr.parse_nested_meta(|meta| {
            let Some(key) = meta.path.get_ident().cloned() else {
                errors.push(syn::Error::new_spanned(
                    &meta.path,
                    unknown_key_message(&meta.path),
                ));
                skip_to_next_key(meta.input);
                return Ok(());
            };
            let name = key.to_string();
            if let Some(known) = KEYS.iter().find(|k| **k == name) {
                self.given.push(known);
            }
            if let Err(e) = self.parse_key(&meta, &key, &name) {
                errors.push(e);
                skip_to_next_key(meta.input);
            }
            Ok(())
        });
        if let Err(e) = result {
            errors.push(e);
        }
    }

    /// Parses the attribute of a derive other than `Claimable` into `self`: `#[claim_if_null(column
    /// = …)]` here, the others as the key they are read as (`#[job_lease(…)]` as `job(…)`), with
    /// their own tokens and spans.
    pub(crate) fn parse_capability(
        &mut self,
        attr: &syn::Attribute,
        capability: Capability,
        errors: &mut Errors,
    ) {
        let name = capability.attr();
        let span = attr.path().span();
        if capability == Capability::ClaimIfNull {
            let mut column = None;
            let parsed = attr.parse_nested_meta(|meta| {
                if !meta.path.is_ident("column") {
                    return Err(meta.error(format!(
                        "unknown `claim_if_null` option `{}`, expected `column`\nhelp: the correct format looks like `{}`",
                        path_text(&meta.path),
                        format_help(CLAIM_IF_NULL)
                    )));
                }
                if column.is_some() {
                    return Err(meta.error("duplicate `column`\nhelp: give one column"));
                }
                column = Some(column_value(&meta, CLAIM_IF_NULL)?);
                Ok(())
            });
            match (parsed, column) {
                (Err(e), _) => errors.push(e),
                (Ok(()), Some(column)) => {
                    self.given.push(CLAIM_IF_NULL);
                    let key = Ident::new(CLAIM_IF_NULL, span);
                    if let Err(e) = set(&mut self.claim_if_null, &key, column) {
                        errors.push(e);
                    }
                }
                (Ok(()), None) => errors.push(syn::Error::new(
                    span,
                    format!(
                        "`#[claim_if_null(...)]` needs `column`\nhelp: the correct format looks like `{}`",
                        format_help(CLAIM_IF_NULL)
                    ),
                )),
            }
            return;
        }
        let key = Ident::new(capability.key(), span);
        let body = match &attr.meta {
            syn::Meta::List(list) => {
                let mut group = proc_macro2::Group::new(
                    proc_macro2::Delimiter::Parenthesis,
                    list.tokens.clone(),
                );
                group.set_span(list.delimiter.span().join());
                quote::quote!(#key #group)
            }
            syn::Meta::Path(_) if capability == Capability::InsertOnce => quote::quote!(#key),
            _ => {
                errors.push(syn::Error::new_spanned(
                    &attr.meta,
                    format!(
                        "`{name}` takes its options in parentheses\nhelp: the correct format looks like `{}`",
                        format_help(capability.key())
                    ),
                ));
                return;
            }
        };
        let read_as: syn::Attribute = syn::parse_quote_spanned!(span=> #[claimable(#body)]);
        self.capability_key = true;
        self.parse(&read_as, errors);
        self.capability_key = false;
    }

    fn parse_key(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        key: &Ident,
        name: &str,
    ) -> syn::Result<()> {
        if !self.capability_key {
            if let Some(derive) = [
                Capability::ClaimIfNull,
                Capability::InsertOnce,
                Capability::JobLease,
                Capability::ControlTable,
            ]
            .into_iter()
            .find(|c| c.key() == name)
            {
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "`{name}` is a derive of its own: `#[derive({})]`\nhelp: the correct format looks like `{}`",
                        derive.derive(),
                        format_help(name)
                    ),
                ));
            }
        }
        let ident_value = |meta: &ParseNestedMeta<'_>| column_value(meta, name);
        let expr_value = |meta: &ParseNestedMeta<'_>| -> syn::Result<Expr> {
            meta.value()
                .and_then(|v| v.parse::<Expr>())
                .map_err(|e| with_help(name, e))
        };
        let int_value = |meta: &ParseNestedMeta<'_>| -> syn::Result<LitInt> {
            meta.value()
                .and_then(|v| v.parse::<LitInt>())
                .map_err(|e| with_help(name, e))
        };
        match name {
            STATE => set(&mut self.state, key, ident_value(meta)?),
            OWNER => set(&mut self.owner, key, ident_value(meta)?),
            CLAIMED_AT => set(&mut self.claimed_at, key, ident_value(meta)?),
            ATTEMPTS => set(&mut self.attempts, key, ident_value(meta)?),
            CLAIM_IF_NULL => set(&mut self.claim_if_null, key, ident_value(meta)?),
            AVAILABLE_AT => set(&mut self.available_at, key, ident_value(meta)?),
            ERROR => set(&mut self.error, key, ident_value(meta)?),
            CLAIMED => set(&mut self.claimed, key, expr_value(meta)?),
            DONE => set(&mut self.done, key, expr_value(meta)?),
            FAILED => set(&mut self.failed, key, expr_value(meta)?),
            PRIORITY => set(&mut self.priority, key, ident_value(meta)?),
            CANCELLED => set(&mut self.cancelled, key, expr_value(meta)?),
            PAUSABLE => {
                let mut column = None;
                if meta.input.peek(syn::token::Paren) {
                    nested(meta, |inner| {
                        if !inner.path.is_ident("key") {
                            return Err(inner.error(format!(
                                "unknown `pausable` option, expected `key`\nhelp: the correct format looks like `{}`",
                                format_help(PAUSABLE)
                            )));
                        }
                        if column.is_some() {
                            return Err(inner.error("duplicate `key`\nhelp: give one key column"));
                        }
                        column = Some(column_value(inner, PAUSABLE)?);
                        Ok(())
                    })?;
                }
                set(&mut self.pausable, key, column)
            }
            READY => {
                let values = if meta.input.peek(Token![=]) {
                    vec![expr_value(meta)?]
                } else if meta.input.peek(syn::token::Paren) {
                    let content;
                    syn::parenthesized!(content in meta.input);
                    let list = content
                        .parse_terminated(Expr::parse, Token![,])
                        .map_err(|e| with_help(name, e))?;
                    list.into_iter().collect()
                } else {
                    return Err(with_help(name, meta.error("expected `=` or `(`")));
                };
                if values.is_empty() {
                    return Err(with_help(
                        name,
                        meta.error("`ready` needs at least one state"),
                    ));
                }
                set(&mut self.ready, key, values)
            }
            MAX_ATTEMPTS => {
                let lit = int_value(meta)?;
                let n: u32 = lit.base10_parse()?;
                if n == 0 {
                    return Err(syn::Error::new(
                        lit.span(),
                        "`max_attempts` must be at least 1\nhelp: every claim is an attempt; `max_attempts = 1` means a stale claim is never retried",
                    ));
                }
                set(&mut self.max_attempts, key, n)
            }
            TIMEOUT_SECS | TIMEOUT_MS => {
                let lit = int_value(meta)?;
                let n: u64 = lit.base10_parse()?;
                if n == 0 {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!("`{name}` must be greater than zero\nhelp: a zero timeout would let any worker take over a claim the moment it is made"),
                    ));
                }
                let ms = if name == TIMEOUT_SECS {
                    n.saturating_mul(1000)
                } else {
                    n
                };
                if ms > MAX_TIMEOUT_MS {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!("`{name}` is longer than the longest ttl diesel-lease takes (1000 years)\nhelp: a claim that must never be rescued needs no `claimed_at` timeout"),
                    ));
                }
                if self.timeout_ms.is_some() {
                    return Err(syn::Error::new(
                        key.span(),
                        "duplicate timeout\nhelp: give one of `timeout_secs` or `timeout_ms`",
                    ));
                }
                self.timeout_key = if name == TIMEOUT_SECS {
                    TIMEOUT_SECS
                } else {
                    TIMEOUT_MS
                };
                set(&mut self.timeout_ms, key, ms)
            }
            ORDER_BY => {
                let items = if meta.input.peek(Token![=]) {
                    vec![OrderItem {
                        column: ident_value(meta)?,
                        desc: false,
                    }]
                } else if meta.input.peek(syn::token::Paren) {
                    let mut items = Vec::new();
                    nested(meta, |item| {
                        let column = item.path.require_ident()?.clone();
                        let desc = if item.input.peek(Ident) {
                            let dir: Ident = item.input.parse()?;
                            match dir.to_string().as_str() {
                                "asc" => false,
                                "desc" => true,
                                _ => {
                                    return Err(syn::Error::new(
                                        dir.span(),
                                        "expected `asc` or `desc`\nhelp: the correct format looks like `#[claimable(order_by(priority desc, id))]`",
                                    ))
                                }
                            }
                        } else {
                            false
                        };
                        items.push(OrderItem { column, desc });
                        Ok(())
                    })?;
                    items
                } else {
                    return Err(with_help(name, meta.error("expected `=` or `(`")));
                };
                set(&mut self.order_by, key, items)
            }
            INSERT_ONCE => {
                let mut returning = None;
                if meta.input.peek(syn::token::Paren) {
                    nested(meta, |inner| {
                        if inner.path.is_ident(RETURNING) {
                            returning = Some(
                                inner
                                    .value()
                                    .and_then(|v| v.parse::<Path>())
                                    .map_err(|e| with_help(name, e))?,
                            );
                            Ok(())
                        } else {
                            Err(inner.error(format!(
                                "unknown `insert_once` option `{}`, expected `returning`\nhelp: the correct format looks like `#[insert_once(returning = Model)]`, or no `#[insert_once]` without the row",
                                path_text(&inner.path)
                            )))
                        }
                    })?;
                }
                set(&mut self.insert_once, key, returning)
            }
            JOB => {
                let mut job = JobAttrs {
                    holder: None,
                    started_at: None,
                    next_run: None,
                };
                nested(meta, |inner| {
                    let slot = if inner.path.is_ident(HOLDER) {
                        &mut job.holder
                    } else if inner.path.is_ident(STARTED_AT) {
                        &mut job.started_at
                    } else if inner.path.is_ident(NEXT_RUN) {
                        &mut job.next_run
                    } else {
                        return Err(inner.error(format!(
                            "unknown `job_lease` option, expected one of `holder`, `started_at`, `next_run`\nhelp: the correct format looks like `{}`",
                            format_help(JOB)
                        )));
                    };
                    if slot.is_some() {
                        return Err(inner
                            .error("duplicate `job_lease` option\nhelp: give each option once"));
                    }
                    *slot = Some(column_value(inner, JOB)?);
                    Ok(())
                })?;
                for (what, present) in [
                    (HOLDER, job.holder.is_some()),
                    (STARTED_AT, job.started_at.is_some()),
                ] {
                    if !present {
                        return Err(syn::Error::new(
                            key.span(),
                            format!("`#[job_lease(...)]` needs `{what}`\nhelp: the correct format looks like `{}`", format_help(JOB)),
                        ));
                    }
                }
                set(&mut self.job, key, job)
            }
            SEMAPHORE => {
                let sem = semaphore_attrs(meta, key)?;
                set(&mut self.semaphore, key, sem)
            }
            _ => Err(syn::Error::new(key.span(), unknown_key_message(&meta.path))),
        }
    }
}

/// Parses `semaphore(...)`; `key` is the `semaphore` token, where a missing option is reported.
fn semaphore_attrs(meta: &ParseNestedMeta<'_>, key: &Ident) -> syn::Result<SemaphoreAttrs> {
    const OPTIONS: &str =
        "`ticket`, `owner`, `resource`, `mode`, `shared`, `exclusive`, `granted`, `expires_at`";
    let mut columns: [(&str, Option<Ident>); 6] = [
        ("ticket", None),
        ("owner", None),
        ("resource", None),
        ("mode", None),
        ("granted", None),
        ("expires_at", None),
    ];
    let (mut shared, mut exclusive): (Option<syn::LitStr>, Option<syn::LitStr>) = (None, None);
    nested(meta, |inner| {
        let duplicate =
            || inner.error("duplicate `control_table` option\nhelp: give each option once");
        for (label, value) in [("shared", &mut shared), ("exclusive", &mut exclusive)] {
            if inner.path.is_ident(label) {
                if value.is_some() {
                    return Err(duplicate());
                }
                let lit: syn::LitStr = inner.value()?.parse().map_err(|e| {
                    with_help(
                        SEMAPHORE,
                        syn::Error::new(
                            e.span(),
                            format!("`{label}` takes the string the access-type column stores"),
                        ),
                    )
                })?;
                if lit.value().is_empty() {
                    return Err(syn::Error::new(
                        lit.span(),
                        format!("`{label}` must not be empty\nhelp: write the value the access-type column stores, e.g. `shared = \"R\"`"),
                    ));
                }
                *value = Some(lit);
                return Ok(());
            }
        }
        let Some((_, slot)) = columns
            .iter_mut()
            .find(|(name, _)| inner.path.is_ident(name))
        else {
            return Err(inner.error(format!(
                "unknown `control_table` option, expected one of {OPTIONS}\nhelp: the correct format looks like `{}`",
                format_help(SEMAPHORE)
            )));
        };
        if slot.is_some() {
            return Err(duplicate());
        }
        *slot = Some(column_value(inner, SEMAPHORE)?);
        Ok(())
    })?;
    let [(_, ticket), (_, owner), (_, resource), (_, mode), (_, granted), (_, expires_at)] =
        columns;
    let missing = |what: &str| {
        syn::Error::new(
            key.span(),
            format!(
                "`#[control_table(...)]` needs `{what}`\nhelp: the correct format looks like `{}`",
                format_help(SEMAPHORE)
            ),
        )
    };
    let (ticket, owner) = match (ticket, owner) {
        (Some(ticket), Some(owner)) => (ticket, owner),
        (None, Some(_)) => return Err(missing("ticket")),
        (Some(_), None) => return Err(missing("owner")),
        (None, None) => return Err(missing("ticket` and `owner")),
    };
    let mode = match (mode, shared, exclusive) {
        (Some(column), Some(shared), Some(exclusive)) => {
            if shared.value() == exclusive.value() {
                return Err(syn::Error::new(
                    exclusive.span(),
                    "`shared` and `exclusive` must differ: a reader and a writer would look alike",
                ));
            }
            Some((column, shared, exclusive))
        }
        (Some(column), _, _) => {
            return Err(syn::Error::new(
                column.span(),
                "`mode` needs `shared = \"…\"` and `exclusive = \"…\"`: the values the access-type column stores for a reader and a writer\nhelp: e.g. `mode = access_type, shared = \"R\", exclusive = \"W\"`",
            ))
        }
        (None, Some(lit), _) | (None, None, Some(lit)) => {
            return Err(syn::Error::new(
                lit.span(),
                "`shared` and `exclusive` need `mode = <access-type column>`\nhelp: e.g. `mode = access_type, shared = \"R\", exclusive = \"W\"`",
            ))
        }
        (None, None, None) => None,
    };
    // The columns the library adds, under their documented names unless renamed.
    let default = |name: &str| Ident::new(name, key.span());
    Ok(SemaphoreAttrs {
        ticket,
        owner,
        resource,
        mode,
        granted: granted.unwrap_or_else(|| default("granted")),
        expires_at: expires_at.unwrap_or_else(|| default("expires_at")),
    })
}

fn path_text(path: &Path) -> String {
    quote::quote!(#path).to_string().replace(' ', "")
}

fn unknown_key_message(path: &Path) -> String {
    let name = path_text(path);
    let expected = KEYS
        .iter()
        .filter(|k| ![CLAIM_IF_NULL, INSERT_ONCE, JOB, SEMAPHORE].contains(*k))
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let help = match closest_key(&name) {
        Some(k) => format!(
            "did you mean `{k}`? The correct format looks like `{}`",
            format_help(k)
        ),
        None => "see the `Claimable` documentation of diesel-lease for every key".to_owned(),
    };
    format!("unknown attribute `{name}`, expected one of {expected}\nhelp: {help}")
}

/// The known key nearest to a misspelled one (edit distance ≤ 2), for "did you mean".
fn closest_key(name: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// What the derive reads from Diesel's own `#[diesel(...)]` attributes on the struct.
#[derive(Default)]
pub(crate) struct DieselStructAttrs {
    pub(crate) table_name: Option<Path>,
    pub(crate) primary_key: Option<Vec<Ident>>,
}

impl DieselStructAttrs {
    /// Reads `table_name` and `primary_key`, skipping every other Diesel option.
    pub(crate) fn parse(&mut self, attr: &syn::Attribute) -> syn::Result<()> {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("table_name") {
                self.table_name = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("primary_key") {
                let content;
                syn::parenthesized!(content in meta.input);
                let cols = content.parse_terminated(Ident::parse, Token![,])?;
                self.primary_key = Some(cols.into_iter().collect());
            } else {
                skip_meta(&meta)?;
            }
            Ok(())
        })
    }
}

/// Reads `#[diesel(column_name = …)]` on a field.
pub(crate) fn diesel_column_name(attr: &syn::Attribute) -> syn::Result<Option<Ident>> {
    let mut name = None;
    attr.parse_nested_meta(|meta| {
        if meta.path.is_ident("column_name") {
            name = Some(meta.value()?.parse::<Ident>()?);
        } else {
            skip_meta(&meta)?;
        }
        Ok(())
    })?;
    Ok(name)
}

/// Skips a Diesel option the derive does not read (`check_for_backend(...)`, `treat_none_as_null = true`, …).
fn skip_meta(meta: &ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        let _content;
        syn::parenthesized!(_content in meta.input);
        let _: proc_macro2::TokenStream = _content.parse()?;
    }
    Ok(())
}

use syn::parse::Parse;
