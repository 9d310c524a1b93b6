//! Code generation: thin wiring from the model's columns to diesel-lease's generic functions.
//!
//! Every runtime item is named through `::diesel_lease::__private`, never through the module that
//! defines it, so the runtime can move its modules without breaking the derive.
//!
//! Generated methods return `::diesel_lease::Result`, the crate's one error type: each body is
//! `Result::map_err(<runtime call>, Into::into)`, which converts a runtime function's
//! `diesel::QueryResult` and is the identity for one that already returns `diesel_lease::Result`.
//! Only `with_next_locked` keeps the caller's error type.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;

use crate::model::{Claim, Model};

pub(crate) fn expand(model: &Model) -> TokenStream {
    let keyed = (!model.pk.is_empty()).then(|| expand_keyed(model));
    let claim = model.claim.as_ref().map(|c| expand_claim(model, c));
    let retry = model.claim.as_ref().map(|_| expand_retry(model));
    let guard = model.guard.as_ref().map(|g| expand_guard(model, g));
    let insert_once = model
        .insert_once
        .as_ref()
        .map(|r| expand_insert_once(model, r.as_ref()));
    let job = model.job.as_ref().map(|j| expand_job(model, j));
    let semaphore = model.semaphore.as_ref().map(|s| expand_semaphore(model, s));
    let key_lock = expand_key_lock(model);
    quote! {
        #[allow(non_upper_case_globals, unused_qualifications, clippy::all)]
        const _: () = {
            #keyed
            #claim
            #retry
            #guard
            #insert_once
            #job
            #semaphore
            #key_lock
        };
    }
}

/// Seed 002's waiting lock by key: `lock_by_pk_if_claimable`/`with_locked` for a model with a
/// state column, `lock_by_pk_if_null`/`with_locked_if_null` for one with a guard column.
fn expand_key_lock(model: &Model) -> TokenStream {
    let name = &model.name;
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let pk_ty = quote!(<Self as ::diesel_lease::__private::Keyed>::Pk);
    let conn = quote!(<C as ::diesel_lease::BorrowConnection>::Conn);
    let mut methods = Vec::new();
    if model.claim.is_some() {
        methods.push(quote! {
            /// Locks the row with primary key `pk` for the caller's transaction if it is in a
            /// ready state, waiting (bounded by a lock timeout) for a transaction that holds it:
            /// `SELECT … WHERE <pk> AND <ready> FOR UPDATE`. `None` when the row does not
            /// qualify, also after the holder changed it. Call inside a transaction.
            pub fn lock_by_pk_if_claimable<C>(conn: &mut C, pk: #pk_ty) -> ::diesel_lease::Result<::core::option::Option<Self>>
            where
                C: ::diesel_lease::BorrowConnection,
                #conn: ::diesel_lease::__private::ClaimableLockConnection<Self>,
            {
                ::diesel_lease::__private::lock_by_pk_if_claimable::<Self, C>(conn, pk)
            }

            /// [`Self::lock_by_pk_if_claimable`] and `work` in one transaction: commit on `Ok`,
            /// roll back on `Err`; `Ok(None)` without calling `work` when the row does not qualify.
            pub fn with_locked<C, T, E, W>(conn: &mut C, pk: #pk_ty, work: W) -> ::core::result::Result<::core::option::Option<T>, E>
            where
                C: ::diesel_lease::BorrowConnection,
                #conn: ::diesel_lease::__private::ClaimableLockConnection<Self>,
                E: ::core::convert::From<::diesel::result::Error>,
                W: ::core::ops::FnOnce(&mut #conn, Self) -> ::core::result::Result<T, E>,
            {
                ::diesel_lease::__private::with_locked::<Self, C, T, E, W>(conn, pk, work)
            }
        });
    }
    if model.guard.is_some() {
        methods.push(quote! {
            /// Locks the row with primary key `pk` for the caller's transaction if its guard
            /// column is still `NULL`, waiting (bounded by a lock timeout) for a transaction that
            /// holds it: `SELECT … WHERE <pk> AND <guard> IS NULL FOR UPDATE`. `None` when the
            /// guard is set, also by the holder waited for. Call inside a transaction.
            pub fn lock_by_pk_if_null<C>(conn: &mut C, pk: #pk_ty) -> ::diesel_lease::Result<::core::option::Option<Self>>
            where
                C: ::diesel_lease::BorrowConnection,
                #conn: ::diesel_lease::__private::GuardLockConnection<Self>,
            {
                ::diesel_lease::__private::lock_by_pk_if_null::<Self, C>(conn, pk)
            }

            /// [`Self::lock_by_pk_if_null`] and `work` in one transaction: commit on `Ok`, roll
            /// back on `Err`; `Ok(None)` without calling `work` when the guard is set.
            pub fn with_locked_if_null<C, T, E, W>(conn: &mut C, pk: #pk_ty, work: W) -> ::core::result::Result<::core::option::Option<T>, E>
            where
                C: ::diesel_lease::BorrowConnection,
                #conn: ::diesel_lease::__private::GuardLockConnection<Self>,
                E: ::core::convert::From<::diesel::result::Error>,
                W: ::core::ops::FnOnce(&mut #conn, Self) -> ::core::result::Result<T, E>,
            {
                ::diesel_lease::__private::with_locked_if_null::<Self, C, T, E, W>(conn, pk, work)
            }
        });
    }
    if methods.is_empty() || model.pk.is_empty() {
        return quote!();
    }
    quote! {
        #[automatically_derived]
        impl #impl_g #name #ty_g #where_g {
            #(#methods)*
        }
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

fn expand_keyed(model: &Model) -> TokenStream {
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
    let state_col = column(model, &c.state);
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
        // Due rows first (with a not-before column), then by key: the order of a partial index
        // `(available_at, pk) WHERE state = ready`.
        c.available_at
            .iter()
            .chain(model.pk.iter().map(|(col, _)| col))
            .map(|col| {
                let n = name_of(col);
                quote!((#n, ::diesel_lease::__private::SortOrder::Asc))
            })
            .collect()
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
        let us = (ms as i64).saturating_mul(1000);
        quote!(#us)
    }));
    let max_attempts = option(c.max_attempts.map(i64::from));
    let value = |e: &syn::Expr| quote_spanned!(e.span()=> <#state_ty as ::core::convert::From<_>>::from(#e));
    let ready: Vec<_> = c.ready.iter().map(value).collect();
    let claimed = value(&c.claimed);
    let done = option(c.done.as_ref().map(value));
    let failed_configured = c.failed.is_some();
    let failed = option(c.failed.as_ref().map(value));
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
    let schedule_consts = schedule_consts(model, c);
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
            "owner_must_be_a_text_column",
            quote!(::diesel_lease::__private::TextColumn),
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
    let conn_bound = quote!(
        C: ::diesel_lease::BorrowConnection,
        <C as ::diesel_lease::BorrowConnection>::Conn: ::diesel_lease::__private::ClaimConnection<Self>,
    );
    let backend =
        quote!(<<C as ::diesel_lease::BorrowConnection>::Conn as ::diesel::Connection>::Backend);
    quote! {
        #(#checks)*

        #[automatically_derived]
        impl #impl_g ::diesel_lease::__private::Claimable for #name #ty_g #where_g {
            type StateSql = <#state_col as ::diesel::Expression>::SqlType;
            type StateValue = #state_ty;
            type ClaimedAtSql = #claimed_at_sql;
            const STATE: &'static str = #state_name;
            const OWNER: ::core::option::Option<&'static str> = #owner_name;
            const CLAIMED_AT: ::core::option::Option<&'static str> = #claimed_at_name;
            const ATTEMPTS: ::core::option::Option<&'static str> = #attempts_name;
            const ORDER: &'static [(&'static str, ::diesel_lease::__private::SortOrder)] = &[#(#order),*];
            const CLAIM_TIMEOUT_MICROS: ::core::option::Option<i64> = #timeout;
            const MAX_ATTEMPTS: ::core::option::Option<i64> = #max_attempts;
            const FAILED_CONFIGURED: bool = #failed_configured;
            const READY_SQL: &'static [::diesel_lease::__private::StateLiteral] = &[#(#ready_sql),*];
            const CLAIMED_SQL: ::diesel_lease::__private::StateLiteral = #claimed_sql;
            const DONE_SQL: ::core::option::Option<::diesel_lease::__private::StateLiteral> = #done_sql;
            const FAILED_SQL: ::core::option::Option<::diesel_lease::__private::StateLiteral> = #failed_sql;
            #schedule_consts
            fn ready_states() -> ::std::vec::Vec<#state_ty> {
                ::std::vec![#(#ready),*]
            }
            fn claimed_state() -> #state_ty {
                #claimed
            }
            fn done_state() -> ::core::option::Option<#state_ty> {
                #done
            }
            fn failed_state() -> ::core::option::Option<#state_ty> {
                #failed
            }
            fn owner(&self) -> ::core::option::Option<&str> {
                #owner_value
            }
            fn attempts(&self) -> ::core::option::Option<i64> {
                #attempts_value
            }
        }

        #[automatically_derived]
        impl #impl_g #name #ty_g #where_g {
            /// Claims the next claimable row for this process (`FOR UPDATE SKIP LOCKED` on
            /// PostgreSQL and MySQL, one write transaction on SQLite); `None` when none is left.
            pub fn claim_next<C>(conn: &mut C) -> ::diesel_lease::Result<::core::option::Option<Self>>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::claim_next::<Self, C>(conn),
                    ::core::convert::Into::into,
                )
            }

            /// Claims up to `n` rows (never more); `n = 0` returns an empty `Vec` without a query.
            pub fn claim_batch<C>(conn: &mut C, n: usize) -> ::diesel_lease::Result<::std::vec::Vec<Self>>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::claim_batch::<Self, C>(conn, n),
                    ::core::convert::Into::into,
                )
            }

            /// [`Self::claim_batch`] with an explicit owner or stale-claim timeout.
            pub fn claim_batch_with<C>(
                conn: &mut C,
                n: usize,
                options: &::diesel_lease::__private::ClaimOptions,
            ) -> ::diesel_lease::Result<::std::vec::Vec<Self>>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::claim_batch_with::<Self, C>(conn, n, options),
                    ::core::convert::Into::into,
                )
            }

            /// [`Self::claim_batch_with`] restricted to rows that also match `filter`.
            pub fn claim_batch_where<C, F>(
                conn: &mut C,
                n: usize,
                options: &::diesel_lease::__private::ClaimOptions,
                filter: F,
            ) -> ::diesel_lease::Result<::std::vec::Vec<Self>>
            where
                #conn_bound
                F: ::diesel::Expression<SqlType = ::diesel::sql_types::Bool>
                    + ::diesel::AppearsOnTable<<Self as ::diesel_lease::__private::Keyed>::Table>
                    + ::diesel::query_builder::QueryFragment<#backend>
                    + ::diesel::query_builder::QueryId,
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::claim_batch_where::<Self, C, F>(conn, n, options, filter),
                    ::core::convert::Into::into,
                )
            }

            /// Selects the next claimable row and keeps it locked until the caller's transaction
            /// ends, skipping rows other transactions hold.
            pub fn lock_next<C>(conn: &mut C) -> ::diesel_lease::Result<::core::option::Option<Self>>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::lock_next::<Self, C>(conn),
                    ::core::convert::Into::into,
                )
            }

            /// [`Self::lock_next`] restricted to rows that also match `filter`.
            pub fn lock_next_where<C, F>(conn: &mut C, filter: F) -> ::diesel_lease::Result<::core::option::Option<Self>>
            where
                #conn_bound
                F: ::diesel::Expression<SqlType = ::diesel::sql_types::Bool>
                    + ::diesel::AppearsOnTable<<Self as ::diesel_lease::__private::Keyed>::Table>
                    + ::diesel::query_builder::QueryFragment<#backend>
                    + ::diesel::query_builder::QueryId,
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::lock_next_where::<Self, C, F>(conn, filter),
                    ::core::convert::Into::into,
                )
            }

            /// Locks the next claimable row and runs `work` on it in one transaction: commit on
            /// `Ok`, roll back (row available again) on `Err`. `Ok(None)` when no row is available.
            pub fn with_next_locked<C, T, E, W>(conn: &mut C, work: W) -> ::core::result::Result<::core::option::Option<T>, E>
            where
                #conn_bound
                E: ::core::convert::From<::diesel::result::Error>,
                W: ::core::ops::FnOnce(&mut <C as ::diesel_lease::BorrowConnection>::Conn, Self) -> ::core::result::Result<T, E>,
            {
                ::diesel_lease::__private::with_next_locked::<Self, C, T, E, W>(conn, work)
            }

            /// Marks this claimed row done if this worker still owns the claim; `false` when it
            /// was rescued by another worker (or already finished).
            pub fn complete<C>(&self, conn: &mut C) -> ::diesel_lease::Result<bool>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::finish(self, conn, ::diesel_lease::__private::Finish::Done),
                    ::core::convert::Into::into,
                )
            }

            /// Marks this claimed row failed if this worker still owns the claim.
            pub fn fail<C>(&self, conn: &mut C) -> ::diesel_lease::Result<bool>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::finish(self, conn, ::diesel_lease::__private::Finish::Failed),
                    ::core::convert::Into::into,
                )
            }

            /// Hands this claimed row back (first ready state, owner cleared) if this worker
            /// still owns the claim.
            pub fn release<C>(&self, conn: &mut C) -> ::diesel_lease::Result<bool>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::finish(self, conn, ::diesel_lease::__private::Finish::Ready),
                    ::core::convert::Into::into,
                )
            }

            /// Marks the claimed `rows` done in one statement (per 200 rows), each only if this
            /// worker still owns its claim: for each row in order, `true` when it was moved,
            /// `false` when it was rescued by another worker (or already finished) and left alone.
            pub fn complete_batch<C>(conn: &mut C, rows: &[Self]) -> ::diesel_lease::Result<::std::vec::Vec<bool>>
            where
                #conn_bound
                <Self as ::diesel_lease::__private::Keyed>::Pk: ::core::cmp::PartialEq,
            {
                ::diesel_lease::__private::finish_batch(rows, conn, ::diesel_lease::__private::Finish::Done)
            }

            /// [`Self::complete_batch`], to the failed state.
            pub fn fail_batch<C>(conn: &mut C, rows: &[Self]) -> ::diesel_lease::Result<::std::vec::Vec<bool>>
            where
                #conn_bound
                <Self as ::diesel_lease::__private::Keyed>::Pk: ::core::cmp::PartialEq,
            {
                ::diesel_lease::__private::finish_batch(rows, conn, ::diesel_lease::__private::Finish::Failed)
            }

            /// [`Self::complete_batch`], back to the first ready state with the owner cleared.
            pub fn release_batch<C>(conn: &mut C, rows: &[Self]) -> ::diesel_lease::Result<::std::vec::Vec<bool>>
            where
                #conn_bound
                <Self as ::diesel_lease::__private::Keyed>::Pk: ::core::cmp::PartialEq,
            {
                ::diesel_lease::__private::finish_batch(rows, conn, ::diesel_lease::__private::Finish::Ready)
            }

            /// Moves this claimed row's `claimed_at` to the database's now if this worker still
            /// owns the claim, so it is not rescued while its work runs; `false` when it was
            /// rescued (stop the work).
            pub fn heartbeat<C>(&self, conn: &mut C) -> ::diesel_lease::Result<bool>
            where #conn_bound
            {
                ::diesel_lease::__private::heartbeat(self, conn)
            }

            /// Claims the next row through an r2d2 pool and guards it: the guard heartbeats
            /// while the work runs and hands the row back if dropped unfinished.
            pub fn claim_next_guarded<C>(
                pool: &::diesel::r2d2::Pool<::diesel::r2d2::ConnectionManager<C>>,
            ) -> ::diesel_lease::Result<::core::option::Option<::diesel_lease::__private::ClaimGuard<Self>>>
            where
                C: ::diesel_lease::LeaseConnection
                    + ::diesel::r2d2::R2D2Connection
                    + ::diesel_lease::__private::ClaimConnection<Self>,
                Self: ::core::marker::Send + ::core::marker::Sync,
            {
                ::diesel_lease::__private::ClaimGuard::claim_next(pool)
            }
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

/// Retries and waits: one-line calls of `claim/schedule.rs` and `claim/wait.rs`.
fn expand_retry(model: &Model) -> TokenStream {
    let name = &model.name;
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let conn_bound = quote!(
        C: ::diesel_lease::BorrowConnection,
        <C as ::diesel_lease::BorrowConnection>::Conn: ::diesel_lease::__private::ClaimConnection<Self>,
    );
    quote! {
        #[automatically_derived]
        impl #impl_g #name #ty_g #where_g {
            /// Hands this claimed row back to be claimed again after `delay` (database clock;
            /// needs `available_at` unless zero) if this worker still owns the claim.
            pub fn retry<C>(&self, conn: &mut C, delay: ::core::time::Duration) -> ::diesel_lease::Result<bool>
            where #conn_bound
            {
                ::diesel_lease::__private::retry(self, conn, delay)
            }

            /// After a failed run: retries the row after the policy's backoff, or moves it to the
            /// failed state when this was its last attempt.
            pub fn fail_or_retry<C>(
                &self,
                conn: &mut C,
                policy: &::diesel_lease::__private::RetryPolicy,
            ) -> ::diesel_lease::Result<::diesel_lease::__private::RetryOutcome>
            where #conn_bound
            {
                ::diesel_lease::__private::fail_or_retry(self, conn, policy, ::core::option::Option::None)
            }

            /// [`Self::fail_or_retry`], storing `error` in the `error` column when one is mapped.
            pub fn fail_or_retry_because<C>(
                &self,
                conn: &mut C,
                policy: &::diesel_lease::__private::RetryPolicy,
                error: &str,
            ) -> ::diesel_lease::Result<::diesel_lease::__private::RetryOutcome>
            where #conn_bound
            {
                ::diesel_lease::__private::fail_or_retry(self, conn, policy, ::core::option::Option::Some(error))
            }

            /// Claims the next row through an r2d2 pool, waiting up to `timeout` for one (woken
            /// by `notify_ready` on PostgreSQL, polling elsewhere).
            pub fn claim_next_wait<C>(
                pool: &::diesel::r2d2::Pool<::diesel::r2d2::ConnectionManager<C>>,
                timeout: ::core::time::Duration,
            ) -> ::diesel_lease::Result<::core::option::Option<Self>>
            where
                C: ::diesel_lease::LeaseConnection
                    + ::diesel::r2d2::R2D2Connection
                    + ::diesel_lease::__private::ClaimConnection<Self>,
            {
                ::diesel_lease::__private::claim_next_wait(pool, timeout)
            }
        }
    }
}

fn expand_guard(model: &Model, guard: &syn::Ident) -> TokenStream {
    let name = &model.name;
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let col = column(model, guard);
    let check = type_check(
        model,
        guard,
        "guard_must_be_a_nullable_column",
        quote!(::diesel_lease::__private::NullableColumn),
    );
    let conn_bound = quote!(
        C: ::diesel_lease::BorrowConnection,
        <C as ::diesel_lease::BorrowConnection>::Conn: ::diesel_lease::__private::GuardConnection<Self, V>,
    );
    quote! {
        #check

        #[automatically_derived]
        impl #impl_g ::diesel_lease::__private::Guarded for #name #ty_g #where_g {
            type GuardSql = <#col as ::diesel::Expression>::SqlType;
            const GUARD: &'static str = <#col as ::diesel::Column>::NAME;
        }

        #[automatically_derived]
        impl #impl_g #name #ty_g #where_g {
            /// Sets the guard column of this row to `value` (`diesel_lease::db_now` for the
            /// database clock) if it is still `NULL`; `true` for exactly one caller.
            pub fn claim_if_null<C, V>(&self, conn: &mut C, value: V) -> ::diesel_lease::Result<bool>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::claim_if_null::<Self, C, V>(
                        conn,
                        <Self as ::diesel_lease::__private::Keyed>::pk(self),
                        value,
                    ),
                    ::core::convert::Into::into,
                )
            }

            /// [`Self::claim_if_null`] for the row with primary key `pk` (a tuple for composite keys).
            pub fn claim_if_null_by_pk<C, V>(
                conn: &mut C,
                pk: <Self as ::diesel_lease::__private::Keyed>::Pk,
                value: V,
            ) -> ::diesel_lease::Result<bool>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::claim_if_null::<Self, C, V>(conn, pk, value),
                    ::core::convert::Into::into,
                )
            }
        }
    }
}

fn expand_insert_once(model: &Model, returning: Option<&syn::Path>) -> TokenStream {
    let name = &model.name;
    let (impl_g, ty_g, where_g) = model.generics.split_for_impl();
    let table = &model.table;
    let output = insert_once_row(returning);
    let mode = match returning {
        Some(r) => quote!(::diesel_lease::__private::Returning<#r>),
        None => quote!(()),
    };
    quote! {
        #[automatically_derived]
        impl #impl_g #name #ty_g #where_g {
            /// Inserts this row unless a unique constraint already holds an equal one:
            /// `Inserted` (with the row where the backend returns it) or `AlreadyExists`. A
            /// duplicate never aborts the caller's transaction.
            pub fn insert_once<C>(
                self,
                conn: &mut C,
            ) -> ::diesel_lease::Result<::diesel_lease::InsertOutcome<#output>>
            where
                C: ::diesel_lease::BorrowConnection,
                <C as ::diesel_lease::BorrowConnection>::Conn:
                    ::diesel_lease::__private::InsertOnceConnection<#table::table, Self, #mode>,
                #mode: ::diesel_lease::__private::InsertReturning<
                    <<C as ::diesel_lease::BorrowConnection>::Conn as ::diesel::Connection>::Backend,
                    Output = #output,
                >,
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::insert_once::<#mode, _, _, C>(conn, #table::table, self),
                    ::core::convert::Into::into,
                )
            }
        }
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
    let conn_bound = quote!(
        C: ::diesel_lease::BorrowConnection,
        <C as ::diesel_lease::BorrowConnection>::Conn: ::diesel_lease::__private::JobConnection<Self>,
    );
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

        #[automatically_derived]
        impl #impl_g #name #ty_g #where_g {
            /// Takes this occurrence of job `pk` if it is due and nobody runs it (or its runner
            /// has been silent past the timeout, database clock): `Some(run)` for exactly one node.
            pub fn try_start_run<C>(
                conn: &mut C,
                pk: <Self as ::diesel_lease::__private::Keyed>::Pk,
                options: &::diesel_lease::__private::JobRunOptions,
            ) -> ::diesel_lease::Result<::core::option::Option<::diesel_lease::__private::JobRun>>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::try_start_run::<Self, C>(conn, pk, options),
                    ::core::convert::Into::into,
                )
            }

            /// Ends `run` of job `pk` if it is still this run; `false` when it was taken over.
            pub fn finish_run<C>(
                conn: &mut C,
                pk: <Self as ::diesel_lease::__private::Keyed>::Pk,
                run: &::diesel_lease::__private::JobRun,
            ) -> ::diesel_lease::Result<bool>
            where #conn_bound
            {
                ::core::result::Result::map_err(
                    ::diesel_lease::__private::finish_run::<Self, C>(conn, pk, run),
                    ::core::convert::Into::into,
                )
            }
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
    let sem_ty = quote!(::diesel_lease::__private::Semaphore);
    let rw_ty = quote!(::diesel_lease::__private::RwLock);
    let constructors = if sem.resource.is_some() {
        let rw = sem.mode.is_some().then(|| {
            quote! {
                /// A reader/writer lock over `resource` whose requests are rows of this table
                /// (readers and writers written with the `shared` / `exclusive` values).
                pub fn rw_lock(resource: impl ::core::convert::Into<::std::string::String>) -> ::diesel_lease::Result<#rw_ty> {
                    #rw_ty::in_control_table::<Self>(::core::option::Option::Some(resource.into()))
                }
            }
        });
        quote! {
            /// A semaphore of `permits` holders over `resource` whose requests are rows of this
            /// table (seed 001's control table). Every process using the resource must declare
            /// the same count.
            pub fn semaphore(resource: impl ::core::convert::Into<::std::string::String>, permits: u32) -> ::diesel_lease::Result<#sem_ty> {
                #sem_ty::in_control_table::<Self>(::core::option::Option::Some(resource.into()), permits)
            }
            #rw
        }
    } else {
        let rw = sem.mode.is_some().then(|| {
            quote! {
                /// A reader/writer lock over the resource this table queues for (readers and
                /// writers written with the `shared` / `exclusive` values).
                pub fn rw_lock() -> ::diesel_lease::Result<#rw_ty> {
                    #rw_ty::in_control_table::<Self>(::core::option::Option::None)
                }
            }
        });
        quote! {
            /// A semaphore of `permits` holders over the one resource this table queues for
            /// (seed 001's control table). Every process must declare the same count.
            pub fn semaphore(permits: u32) -> ::diesel_lease::Result<#sem_ty> {
                #sem_ty::in_control_table::<Self>(::core::option::Option::None, permits)
            }
            #rw
        }
    };
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

        #[automatically_derived]
        impl #impl_g #name #ty_g #where_g {
            #constructors
        }
    }
}
