//! Code generation: trait impls that describe the model's columns, nothing else.
//!
//! The derive adds no method to the user's type: it implements the capability traits
//! (`Keyed`, `Claimable`, `ClaimIfNull`, `InsertOnce`, `JobLease`, `ControlTable`) and the
//! marker traits that say which optional columns and states exist (`HasDoneState`, …). The
//! operations are extension traits of `diesel_lease::dsl`, blanket-implemented over those.
//!
//! Every runtime item is named through `::diesel_lease::__private`, never through the module that
//! defines it, so the runtime can move its modules without breaking the derive.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::model::{Claim, Model};

pub(crate) fn expand(model: &Model) -> TokenStream {
    let keyed = (model.keyed && !model.pk.is_empty()).then(|| expand_keyed(model));
    let claim = model.claim.as_ref().map(|c| expand_claim(model, c));
    let claim_if_null = model
        .claim_if_null
        .as_ref()
        .map(|g| expand_claim_if_null(model, g));
    let insert_once = model
        .insert_once
        .as_ref()
        .map(|r| expand_insert_once(model, r.as_ref()));
    let job = model.job.as_ref().map(|j| expand_job(model, j));
    let semaphore = model.semaphore.as_ref().map(|s| expand_semaphore(model, s));
    quote! {
        #[allow(non_upper_case_globals, unused_qualifications, clippy::all)]
        const _: () = {
            #keyed
            #claim
            #claim_if_null
            #insert_once
            #job
            #semaphore
        };
    }
}

/// `impl ::diesel_lease::__private::<Trait> for <model> {}`: a marker of what the model has.
pub(crate) fn marker(
    model_name: &syn::Ident,
    generics: &syn::Generics,
    trait_name: &str,
) -> TokenStream {
    let (impl_g, ty_g, where_g) = generics.split_for_impl();
    let t = syn::Ident::new(trait_name, proc_macro2::Span::call_site());
    quote! {
        #[automatically_derived]
        impl #impl_g ::diesel_lease::__private::#t for #model_name #ty_g #where_g {}
    }
}

/// The column's type, spanned at the user's token so that a column missing from `table!` is
/// reported there. Columns are only ever named in type position (values are built with
/// `Default`), so a missing one is a single error rather than one per namespace.
fn column(model: &Model, col: &syn::Ident) -> TokenStream {
    let table = &model.table;
    quote_spanned!(col.span()=> #table::#col)
}

/// The column as a value (`table!` columns are unit structs deriving `Default`).
fn column_value(model: &Model, col: &syn::Ident) -> TokenStream {
    let c = column(model, col);
    quote!(<#c as ::core::default::Default>::default())
}

pub(crate) fn expand_keyed(model: &Model) -> TokenStream {
    let name = &model.name;
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let table = &model.table;
    let pk_cols: Vec<_> = model.pk.iter().map(|(c, _)| column(model, c)).collect();
    let pk_values: Vec<_> = model
        .pk
        .iter()
        .map(|(c, _)| column_value(model, c))
        .collect();
    let pk_fields: Vec<_> = model.pk.iter().map(|(_, f)| &f.ident).collect();
    let pk_tys: Vec<_> = model.pk.iter().map(|(_, f)| &f.ty).collect();
    let pk_ty = key_type(&pk_tys);
    // A one-column key's value bound alone, as `pk = ?` binds it (`pk IN (?, …)` statements).
    let (bind_ty, bind) = if model.pk.len() == 1 {
        let (col, ty) = (&pk_cols[0], pk_tys[0]);
        (
            quote!(::diesel::dsl::AsExpr<#ty, #col>),
            quote!(::core::option::Option::Some(
                <#ty as ::diesel::expression::AsExpression<::diesel::dsl::SqlTypeOf<#col>>>::as_expression(pk)
            )),
        )
    } else {
        (
            quote!(()),
            quote!({
                let _ = pk;
                ::core::option::Option::None
            }),
        )
    };
    let (pk_value, filter_ty, filter) = if model.pk.len() == 1 {
        let (col, value, field, ty) = (&pk_cols[0], &pk_values[0], pk_fields[0], pk_tys[0]);
        (
            quote!(::core::clone::Clone::clone(&self.#field)),
            quote!(::diesel::dsl::Eq<#col, #ty>),
            quote!(::diesel::ExpressionMethods::eq(#value, pk)),
        )
    } else {
        let idx = (0..model.pk.len()).map(syn::Index::from);
        let mut filter_ty = quote!();
        let mut filter = quote!();
        for (i, (((col, value), ty), ix)) in pk_cols
            .iter()
            .zip(&pk_values)
            .zip(&pk_tys)
            .zip(idx)
            .enumerate()
        {
            let eq_ty = quote!(::diesel::dsl::Eq<#col, #ty>);
            let eq = quote!(::diesel::ExpressionMethods::eq(#value, pk.#ix));
            if i == 0 {
                filter_ty = eq_ty;
                filter = eq;
            } else {
                filter_ty = quote!(::diesel::dsl::And<#filter_ty, #eq_ty>);
                filter = quote!(::diesel::BoolExpressionMethods::and(#filter, #eq));
            }
        }
        (
            quote!((#(::core::clone::Clone::clone(&self.#pk_fields),)*)),
            filter_ty,
            filter,
        )
    };
    quote! {
        #[automatically_derived]
        impl #impl_g ::diesel_lease::__private::Keyed for #name #ty_g #where_g {
            type Table = #table::table;
            type Pk = #pk_ty;
            type PkFilter = #filter_ty;
            const PK: &'static [&'static str] = &[#(<#pk_cols as ::diesel::Column>::NAME),*];
            fn pk(&self) -> Self::Pk {
                #pk_value
            }
            fn pk_filter(pk: Self::Pk) -> Self::PkFilter {
                #filter
            }
            type PkValue = #bind_ty;
            fn pk_value(pk: Self::Pk) -> ::core::option::Option<Self::PkValue> {
                #bind
            }
        }
    }
}

/// `Keyed::Pk`: the key field's type, or a tuple of them for a composite key.
pub(crate) fn key_type(tys: &[&syn::Type]) -> TokenStream {
    match tys {
        [ty] => quote!(#ty),
        tys => quote!((#(#tys,)*)),
    }
}

/// The row `insert_once` returns in `InsertOutcome::Inserted`: the `returning` model, or `()`.
pub(crate) fn insert_once_row(returning: Option<&syn::Path>) -> TokenStream {
    match returning {
        Some(r) => quote!(#r),
        None => quote!(()),
    }
}

/// `fn <name><T: Check>() {}` called with the column's SQL type, all spanned at the attribute
/// value: a wrong column type is reported on that token with the trait's own message, and the
/// function's name says what was required.
fn type_check(model: &Model, col: &syn::Ident, name: &str, check: TokenStream) -> TokenStream {
    let c = column(model, col);
    let f = syn::Ident::new(name, col.span());
    quote_spanned! {col.span()=>
        const _: fn() = || {
            fn #f<T: #check + ?::core::marker::Sized>() {}
            #f::<<#c as ::diesel::Expression>::SqlType>();
        };
    }
}

/// A timestamp column's SQL type, for an associated type bounded by `TimestampType`: the runtime
/// types its clock expressions by it, so they write and compare in the column's own terms (an
/// instant, or a UTC wall-clock time). Spanned at the attribute value, so that bound is also the
/// type check: a column of another type is reported once, on that token, with the trait's message.
fn timestamp_sql_type(model: &Model, col: &syn::Ident) -> TokenStream {
    let c = column(model, col);
    quote_spanned!(col.span()=> <#c as ::diesel::Expression>::SqlType)
}

fn option<T: quote::ToTokens>(v: Option<T>) -> TokenStream {
    match v {
        Some(v) => quote!(::core::option::Option::Some(#v)),
        None => quote!(::core::option::Option::None),
    }
}

fn expand_claim(model: &Model, c: &Claim) -> TokenStream {
    let name = &model.name;
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let state_ty = &c.state_ty;
    let name_of = |col: &syn::Ident| {
        let col = column(model, col);
        quote!(<#col as ::diesel::Column>::NAME)
    };
    let state_name = name_of(&c.state);
    let owner_name = option(c.owner.as_ref().map(|(col, _)| name_of(col)));
    let claimed_at_name = option(c.claimed_at.as_ref().map(name_of));
    let claimed_at_sql = match &c.claimed_at {
        Some(col) => timestamp_sql_type(model, col),
        None => quote!(::diesel::sql_types::Timestamp),
    };
    let attempts_name = option(c.attempts.as_ref().map(|(col, _)| name_of(col)));
    let order: Vec<TokenStream> = if c.order_by.is_empty() {
        // Higher priority first (with a priority column), then due rows first (with a
        // not-before column), then by key: the order of a partial index
        // `(priority DESC, available_at, pk) WHERE state = ready`.
        let priority = c.priority.iter().map(|col| {
            let n = name_of(col);
            quote!((#n, ::diesel_lease::__private::SortOrder::Desc))
        });
        let ascending = c
            .available_at
            .iter()
            .chain(model.pk.iter().map(|(col, _)| col))
            .map(|col| {
                let n = name_of(col);
                quote!((#n, ::diesel_lease::__private::SortOrder::Asc))
            });
        priority.chain(ascending).collect()
    } else {
        c.order_by
            .iter()
            .map(|o| {
                let n = name_of(&o.column);
                let dir = if o.desc { quote!(Desc) } else { quote!(Asc) };
                quote!((#n, ::diesel_lease::__private::SortOrder::#dir))
            })
            .collect()
    };
    let timeout = option(c.timeout_ms.map(|ms| {
        // At most `MAX_TIMEOUT_MS` (checked when parsed): fits an i64 of microseconds.
        let us = ms as i64 * 1000;
        quote!(#us)
    }));
    let max_attempts = option(c.max_attempts.map(i64::from));
    let ready_sql: Vec<_> = c.ready.iter().map(crate::literal::tokens).collect();
    let claimed_sql = crate::literal::tokens(&c.claimed);
    let done_sql = option(c.done.as_ref().map(crate::literal::tokens));
    let failed_sql = option(c.failed.as_ref().map(crate::literal::tokens));
    // Spanned at the attribute value: a field of the wrong type is reported on that token.
    let owner_value = match &c.owner {
        Some((col, field)) => {
            let field = syn::Ident::new(&field.to_string(), col.span());
            quote_spanned!(col.span()=> ::diesel_lease::__private::OwnerValue::owner_str(&self.#field))
        }
        None => quote!(::core::option::Option::None),
    };
    let attempts_value = match &c.attempts {
        Some((col, field)) => {
            let field = syn::Ident::new(&field.to_string(), col.span());
            quote_spanned!(col.span()=> ::diesel_lease::__private::AttemptsValue::attempts_i64(&self.#field))
        }
        None => quote!(::core::option::Option::None),
    };
    // A NOT NULL count is incremented as it is (`attempts + 1`, the statement as typed by hand);
    // only a field that can read NULL gets `COALESCE(attempts, 0) + 1`.
    let attempts_nullable = c
        .attempts_ty
        .as_ref()
        .is_some_and(|ty| !crate::ty::is_plain_integer(ty));
    let schedule_consts = schedule_consts(model, c);
    let pause_const = c.pausable.as_ref().map(|key| {
        let key = option(key.as_ref().map(name_of));
        quote!(const PAUSE: ::core::option::Option<::diesel_lease::__private::PauseShape> = ::core::option::Option::Some(::diesel_lease::__private::PauseShape { key: #key });)
    });
    let cancelled_const = c.cancelled.as_ref().map(|e| {
        let sql = crate::literal::tokens(e);
        quote!(const CANCELLED_SQL: ::core::option::Option<::diesel_lease::__private::StateLiteral> = ::core::option::Option::Some(#sql);)
    });
    let mut checks = vec![];
    if let Some(col) = &c.error {
        checks.push(type_check(
            model,
            col,
            "error_must_be_a_text_column",
            quote!(::diesel_lease::__private::ErrorColumn),
        ));
    }
    if let Some((col, _)) = &c.owner {
        checks.push(type_check(
            model,
            col,
            "owner_must_be_a_nullable_text_column",
            quote!(::diesel_lease::__private::OwnerColumn),
        ));
    }
    if let Some(Some(col)) = &c.pausable {
        checks.push(type_check(
            model,
            col,
            "pause_key_must_be_a_text_column",
            quote!(::diesel_lease::__private::PauseKeyColumn),
        ));
    }
    if let Some(col) = &c.priority {
        checks.push(type_check(
            model,
            col,
            "priority_must_be_an_integer_column",
            quote!(::diesel_lease::__private::PriorityColumn),
        ));
    }
    if let Some((col, _)) = &c.attempts {
        checks.push(type_check(
            model,
            col,
            "attempts_must_be_an_integer_column",
            quote!(::diesel_lease::__private::IntegerColumn),
        ));
    }
    let markers = [
        (c.done.is_some(), "HasDoneState"),
        (c.failed.is_some(), "HasFailedState"),
        (c.claimed_at.is_some(), "HasClaimedAt"),
        (c.attempts.is_some(), "HasAttempts"),
        (
            c.cancelled.is_some() || crate::literal::cancels_to_failed(&c.ready, c.failed.as_ref()),
            "HasCancelState",
        ),
        (c.pausable.is_some(), "Pausable"),
        (matches!(c.pausable, Some(Some(_))), "HasPauseKey"),
    ]
    .into_iter()
    .filter(|(has, _)| *has)
    .map(|(_, t)| marker(name, &model.generics, t));
    // The state values must be values of the state field's type. When its spelling says what
    // it is (text, an integer, a boolean) `fit.rs` has checked them; otherwise (an alias, an enum)
    // each is converted into it here, spanned at the value, so a mismatch is reported on that
    // token. The SQL itself carries the literals.
    if !crate::fit::decides_state_values(state_ty) {
        let states = c
            .ready
            .iter()
            .chain(std::iter::once(&c.claimed))
            .chain(&c.done)
            .chain(&c.failed)
            .chain(&c.cancelled)
            .map(|e| {
                let ty = respan(quote!(#state_ty), e.span());
                quote_spanned!(e.span()=> let _: #ty = <#ty as ::core::convert::From<_>>::from(#e);)
            });
        checks.push(quote! {
            const _: fn() = || {
                #(#states)*
            };
        });
    }
    checks.push(selectable_check(model));
    let order_key = c.order_key.as_ref().map(|(col, f)| {
        let column = column(model, col);
        let (ty, field) = (&f.ty, &f.ident);
        quote! {
            #[automatically_derived]
            impl #impl_g ::diesel_lease::__private::ClaimOrderKey for #name #ty_g #where_g {
                type OrderColumn = #column;
                type OrderValue = #ty;
                fn order_value(&self) -> &Self::OrderValue {
                    &self.#field
                }
            }
        }
    });
    quote! {
        #(#checks)*

        #[automatically_derived]
        impl #impl_g ::diesel_lease::__private::Claimable for #name #ty_g #where_g {
            type ClaimedAtSql = #claimed_at_sql;
            const STATE: &'static str = #state_name;
            const OWNER: ::core::option::Option<&'static str> = #owner_name;
            const CLAIMED_AT: ::core::option::Option<&'static str> = #claimed_at_name;
            const ATTEMPTS: ::core::option::Option<&'static str> = #attempts_name;
            const ATTEMPTS_NULLABLE: bool = #attempts_nullable;
            const ORDER: &'static [(&'static str, ::diesel_lease::__private::SortOrder)] = &[#(#order),*];
            const CLAIM_TIMEOUT_MICROS: ::core::option::Option<i64> = #timeout;
            const MAX_ATTEMPTS: ::core::option::Option<i64> = #max_attempts;
            const READY_SQL: &'static [::diesel_lease::__private::StateLiteral] = &[#(#ready_sql),*];
            const CLAIMED_SQL: ::diesel_lease::__private::StateLiteral = #claimed_sql;
            const DONE_SQL: ::core::option::Option<::diesel_lease::__private::StateLiteral> = #done_sql;
            const FAILED_SQL: ::core::option::Option<::diesel_lease::__private::StateLiteral> = #failed_sql;
            #schedule_consts
            #cancelled_const
            #pause_const
            fn owner(&self) -> ::core::option::Option<&str> {
                #owner_value
            }
            fn attempts(&self) -> ::core::option::Option<i64> {
                #attempts_value
            }
        }

        #(#markers)*
        #order_key
    }
}

/// `tokens` with every token at `span`, so that an error anywhere in them is reported there.
fn respan(tokens: TokenStream, span: proc_macro2::Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut t| {
            if let proc_macro2::TokenTree::Group(g) = &t {
                let mut group = proc_macro2::Group::new(g.delimiter(), respan(g.stream(), span));
                group.set_span(span);
                t = proc_macro2::TokenTree::Group(group);
            }
            t.set_span(span);
            t
        })
        .collect()
}

/// Claims read the claimed rows with Diesel's `as_select()`: a model that is not `Selectable`
/// is reported here, at the derive, by the `ClaimRow` bound's own message (which names the
/// fix), rather than only as Diesel's `QueryMetadata` / `CompatibleType` errors at each call.
fn selectable_check(model: &Model) -> TokenStream {
    let span = proc_macro2::Span::call_site();
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let name = syn::Ident::new(&model.name.to_string(), span);
    quote_spanned! {span=>
        #[allow(dead_code)]
        fn claimable_model_checks #impl_g () #where_g {
            fn model_must_implement_selectable<T: ::diesel_lease::__private::ClaimRow + ?::core::marker::Sized>() {}
            model_must_implement_selectable::<#name #ty_g>();
        }
    }
}

/// `AVAILABLE_AT` and `ERROR` of `Claimable`, only when mapped (the trait's defaults say
/// "none"). The not-before column's SQL type is spanned at the attribute value: its
/// `TimestampType` bound is the type check.
fn schedule_consts(model: &Model, c: &Claim) -> TokenStream {
    let name_of = |col: &syn::Ident| {
        let col = column(model, col);
        quote!(<#col as ::diesel::Column>::NAME)
    };
    let available_at = c.available_at.as_ref().map(|col| {
        let (name, sql) = (name_of(col), timestamp_sql_type(model, col));
        quote! {
            const AVAILABLE_AT: ::core::option::Option<::diesel_lease::__private::TimeColumn> =
                ::core::option::Option::Some(::diesel_lease::__private::TimeColumn::of::<#sql>(#name));
        }
    });
    let error = c.error.as_ref().map(|col| {
        let name = name_of(col);
        quote!(const ERROR: ::core::option::Option<&'static str> = ::core::option::Option::Some(#name);)
    });
    quote!(#available_at #error)
}

fn expand_claim_if_null(model: &Model, col_ident: &syn::Ident) -> TokenStream {
    let name = &model.name;
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let col = column(model, col_ident);
    let check = type_check(
        model,
        col_ident,
        "claim_if_null_column_must_be_nullable",
        quote!(::diesel_lease::__private::NullableColumn),
    );
    quote! {
        #check

        #[automatically_derived]
        impl #impl_g ::diesel_lease::__private::ClaimIfNull for #name #ty_g #where_g {
            type NullColumnSql = <#col as ::diesel::Expression>::SqlType;
            const NULL_COLUMN: &'static str = <#col as ::diesel::Column>::NAME;
        }
    }
}

fn expand_insert_once(model: &Model, returning: Option<&syn::Path>) -> TokenStream {
    let name = &model.name;
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let table = &model.table;
    let row = insert_once_row(returning);
    let mode = insert_once_mode(returning);
    quote! {
        #[automatically_derived]
        impl #impl_g ::diesel_lease::__private::InsertOnce for #name #ty_g #where_g {
            type Table = #table::table;
            type Mode = #mode;
            type Row = #row;
        }
    }
}

/// How `insert_once` reads the row back: `Returning<R>`, or `()` for nothing.
pub(crate) fn insert_once_mode(returning: Option<&syn::Path>) -> TokenStream {
    match returning {
        Some(r) => quote!(::diesel_lease::__private::Returning<#r>),
        None => quote!(()),
    }
}

fn expand_job(model: &Model, job: &crate::attrs::JobAttrs) -> TokenStream {
    let name = &model.name;
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let (Some(holder), Some(started_at)) = (&job.holder, &job.started_at) else {
        return quote!();
    };
    let name_of = |col: &syn::Ident| {
        let col = column(model, col);
        quote!(<#col as ::diesel::Column>::NAME)
    };
    let (holder_name, started_name) = (name_of(holder), name_of(started_at));
    let next_run_name = option(job.next_run.as_ref().map(name_of));
    let started_at_sql = timestamp_sql_type(model, started_at);
    let next_run_sql = match &job.next_run {
        Some(col) => timestamp_sql_type(model, col),
        None => quote!(::diesel::sql_types::Nullable<::diesel::sql_types::Timestamp>),
    };
    let checks = [
        type_check(
            model,
            holder,
            "job_holder_must_be_a_nullable_column",
            quote!(::diesel_lease::__private::NullableColumn),
        ),
        type_check(
            model,
            holder,
            "job_holder_must_be_a_text_column",
            quote!(::diesel_lease::__private::TextColumn),
        ),
        type_check(
            model,
            started_at,
            "job_started_at_must_be_a_nullable_column",
            quote!(::diesel_lease::__private::NullableColumn),
        ),
    ];
    quote! {
        #(#checks)*

        #[automatically_derived]
        impl #impl_g ::diesel_lease::__private::JobLease for #name #ty_g #where_g {
            type StartedAtSql = #started_at_sql;
            type NextRunSql = #next_run_sql;
            const HOLDER: &'static str = #holder_name;
            const STARTED_AT: &'static str = #started_name;
            const NEXT_RUN: ::core::option::Option<&'static str> = #next_run_name;
        }

    }
}

/// Seed 001's control table: `ControlTable` and the `semaphore`/`rw_lock` constructors.
fn expand_semaphore(model: &Model, sem: &crate::attrs::SemaphoreAttrs) -> TokenStream {
    let name = &model.name;
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let table = &model.table;
    let name_of = |col: &syn::Ident| {
        let col = column(model, col);
        quote!(<#col as ::diesel::Column>::NAME)
    };
    let table_name = model
        .table
        .segments
        .last()
        .map(|s| s.ident.to_string())
        .unwrap_or_default();
    let (ticket, owner, granted, expires_at) = (
        name_of(&sem.ticket),
        name_of(&sem.owner),
        name_of(&sem.granted),
        name_of(&sem.expires_at),
    );
    let resource = option(sem.resource.as_ref().map(name_of));
    let mode = option(sem.mode.as_ref().map(|(col, shared, exclusive)| {
        let col = name_of(col);
        quote!(::diesel_lease::__private::ModeColumn {
            column: #col,
            shared: #shared,
            exclusive: #exclusive,
        })
    }));
    let mut checks = vec![
        type_check(
            model,
            &sem.ticket,
            "semaphore_ticket_must_be_an_integer_column",
            quote!(::diesel_lease::__private::TicketColumn),
        ),
        type_check(
            model,
            &sem.owner,
            "semaphore_owner_must_be_a_text_column",
            quote!(::diesel_lease::__private::NotNullTextColumn),
        ),
        type_check(
            model,
            &sem.granted,
            "semaphore_granted_must_be_a_bool_column",
            quote!(::diesel_lease::__private::GrantedColumn),
        ),
        type_check(
            model,
            &sem.expires_at,
            "semaphore_expires_at_must_be_a_bigint_column",
            quote!(::diesel_lease::__private::ExpiresAtColumn),
        ),
    ];
    if let Some(col) = &sem.resource {
        checks.push(type_check(
            model,
            col,
            "semaphore_resource_must_be_a_text_column",
            quote!(::diesel_lease::__private::NotNullTextColumn),
        ));
    }
    if let Some((col, _, _)) = &sem.mode {
        checks.push(type_check(
            model,
            col,
            "semaphore_mode_must_be_a_text_column",
            quote!(::diesel_lease::__private::NotNullTextColumn),
        ));
    }
    let resource_marker = if sem.resource.is_some() {
        "ResourceColumn"
    } else {
        "OneResource"
    };
    let markers = std::iter::once(resource_marker)
        .chain(sem.mode.as_ref().map(|_| "HasModeColumn"))
        .map(|t| marker(name, &model.generics, t));
    quote! {
        #(#checks)*

        #[automatically_derived]
        impl #impl_g ::diesel_lease::__private::ControlTable for #name #ty_g #where_g {
            type Table = #table::table;
            const NAME: &'static str = #table_name;
            const TICKET: &'static str = #ticket;
            const OWNER: &'static str = #owner;
            const RESOURCE: ::core::option::Option<&'static str> = #resource;
            const MODE: ::core::option::Option<::diesel_lease::__private::ModeColumn> = #mode;
            const GRANTED: &'static str = #granted;
            const EXPIRES_AT: &'static str = #expires_at;
        }

        #(#markers)*
    }
}
