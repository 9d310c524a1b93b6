//! What the derive emits when it reports errors (thiserror's `fallback.rs`): the errors, and an
//! inherent impl that declares every method the derive can generate, with loose signatures and
//! `unreachable!()` bodies. A mistake in the attribute is then reported once, at the attribute,
//! and not again as "no function or associated item named `claim_next`" at every call site.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput};

use crate::attrs::{Errors, StructAttrs};
use crate::{expand, model};

/// The errors, plus the method declarations when `input` is a struct (there is nothing to
/// declare them on otherwise). Keep the list in step with `expand.rs`: a test checks that both
/// declare the same methods with the same parameters.
pub(crate) fn expand(input: &DeriveInput, errors: syn::Error) -> TokenStream {
    let errors = errors.into_compile_error();
    if !matches!(input.data, Data::Struct(_)) {
        return errors;
    }
    let name = &input.ident;
    let (impl_g, ty_g, where_g) = input.generics.split_for_impl();
    // Parsed again, errors ignored: they are the ones being reported.
    let attrs = StructAttrs::parse(&input.attrs, &mut Errors::default());
    let (pk_param, pk) = match known_key_type(input, &attrs) {
        Some(ty) => (quote!(), ty),
        None => (quote!(K,), quote!(K)),
    };
    let (row_param, row) = match known_insert_once_row(&attrs) {
        Some(ty) => (quote!(), ty),
        None => (quote!(, R), quote!(R)),
    };
    // A control table without a resource column serves one resource: no resource parameter.
    let (sem_params, rw_params) = match attrs.claimable.semaphore.as_ref() {
        Some(s) if s.value.resource.is_none() => (quote!(_permits: u32), quote!()),
        _ => (
            quote!(_resource: impl ::core::convert::Into<::std::string::String>, _permits: u32),
            quote!(_resource: impl ::core::convert::Into<::std::string::String>),
        ),
    };
    // No bound that needs one of the impls that failed (the connection traits): every method is
    // callable with any connection. `with_next_locked` keeps its closure's signature, without
    // which a caller's `|conn, row| …` could not be type-checked.
    quote! {
        #errors

        #[allow(non_upper_case_globals, unused_qualifications, clippy::all)]
        const _: () = {
            #[automatically_derived]
            impl #impl_g #name #ty_g #where_g {
                pub fn claim_next<C>(_conn: &mut C) -> ::diesel_lease::Result<::core::option::Option<Self>> {
                    ::core::unreachable!()
                }

                pub fn claim_batch<C>(_conn: &mut C, _n: usize) -> ::diesel_lease::Result<::std::vec::Vec<Self>> {
                    ::core::unreachable!()
                }

                pub fn claim_batch_with<C>(
                    _conn: &mut C,
                    _n: usize,
                    _options: &::diesel_lease::__private::ClaimOptions,
                ) -> ::diesel_lease::Result<::std::vec::Vec<Self>> {
                    ::core::unreachable!()
                }

                pub fn claim_batch_where<C, F>(
                    _conn: &mut C,
                    _n: usize,
                    _options: &::diesel_lease::__private::ClaimOptions,
                    _filter: F,
                ) -> ::diesel_lease::Result<::std::vec::Vec<Self>> {
                    ::core::unreachable!()
                }

                pub fn lock_next<C>(_conn: &mut C) -> ::diesel_lease::Result<::core::option::Option<Self>> {
                    ::core::unreachable!()
                }

                pub fn lock_next_where<C, F>(_conn: &mut C, _filter: F) -> ::diesel_lease::Result<::core::option::Option<Self>> {
                    ::core::unreachable!()
                }

                pub fn with_next_locked<C, T, E, W>(_conn: &mut C, _work: W) -> ::core::result::Result<::core::option::Option<T>, E>
                where
                    C: ::diesel_lease::BorrowConnection,
                    W: ::core::ops::FnOnce(&mut <C as ::diesel_lease::BorrowConnection>::Conn, Self) -> ::core::result::Result<T, E>,
                {
                    ::core::unreachable!()
                }

                pub fn complete<C>(&self, _conn: &mut C) -> ::diesel_lease::Result<bool> {
                    ::core::unreachable!()
                }

                pub fn fail<C>(&self, _conn: &mut C) -> ::diesel_lease::Result<bool> {
                    ::core::unreachable!()
                }

                pub fn release<C>(&self, _conn: &mut C) -> ::diesel_lease::Result<bool> {
                    ::core::unreachable!()
                }

                pub fn heartbeat<C>(&self, _conn: &mut C) -> ::diesel_lease::Result<bool> {
                    ::core::unreachable!()
                }

                pub fn complete_batch<C>(_conn: &mut C, _rows: &[Self]) -> ::diesel_lease::Result<::std::vec::Vec<bool>> {
                    ::core::unreachable!()
                }

                pub fn fail_batch<C>(_conn: &mut C, _rows: &[Self]) -> ::diesel_lease::Result<::std::vec::Vec<bool>> {
                    ::core::unreachable!()
                }

                pub fn release_batch<C>(_conn: &mut C, _rows: &[Self]) -> ::diesel_lease::Result<::std::vec::Vec<bool>> {
                    ::core::unreachable!()
                }

                pub fn claim_next_guarded<C>(
                    _pool: &::diesel::r2d2::Pool<::diesel::r2d2::ConnectionManager<C>>,
                ) -> ::diesel_lease::Result<::core::option::Option<::diesel_lease::__private::ClaimGuard<Self>>>
                where
                    C: ::diesel::r2d2::R2D2Connection + 'static,
                {
                    ::core::unreachable!()
                }

                pub fn retry<C>(&self, _conn: &mut C, _delay: ::core::time::Duration) -> ::diesel_lease::Result<bool> {
                    ::core::unreachable!()
                }

                pub fn fail_or_retry<C>(
                    &self,
                    _conn: &mut C,
                    _policy: &::diesel_lease::__private::RetryPolicy,
                ) -> ::diesel_lease::Result<::diesel_lease::__private::RetryOutcome> {
                    ::core::unreachable!()
                }

                pub fn fail_or_retry_because<C>(
                    &self,
                    _conn: &mut C,
                    _policy: &::diesel_lease::__private::RetryPolicy,
                    _error: &str,
                ) -> ::diesel_lease::Result<::diesel_lease::__private::RetryOutcome> {
                    ::core::unreachable!()
                }

                pub fn claim_next_wait<C>(
                    _pool: &::diesel::r2d2::Pool<::diesel::r2d2::ConnectionManager<C>>,
                    _timeout: ::core::time::Duration,
                ) -> ::diesel_lease::Result<::core::option::Option<Self>>
                where
                    C: ::diesel::r2d2::R2D2Connection + 'static,
                {
                    ::core::unreachable!()
                }

                pub fn claim_if_null<C, V>(&self, _conn: &mut C, _value: V) -> ::diesel_lease::Result<bool> {
                    ::core::unreachable!()
                }

                pub fn claim_if_null_by_pk<C, #pk_param V>(_conn: &mut C, _pk: #pk, _value: V) -> ::diesel_lease::Result<bool> {
                    ::core::unreachable!()
                }

                pub fn insert_once<C #row_param>(self, _conn: &mut C) -> ::diesel_lease::Result<::diesel_lease::InsertOutcome<#row>> {
                    ::core::unreachable!()
                }

                pub fn try_start_run<C, #pk_param>(
                    _conn: &mut C,
                    _pk: #pk,
                    _options: &::diesel_lease::__private::JobRunOptions,
                ) -> ::diesel_lease::Result<::core::option::Option<::diesel_lease::__private::JobRun>> {
                    ::core::unreachable!()
                }

                pub fn finish_run<C, #pk_param>(
                    _conn: &mut C,
                    _pk: #pk,
                    _run: &::diesel_lease::__private::JobRun,
                ) -> ::diesel_lease::Result<bool> {
                    ::core::unreachable!()
                }

                pub fn lock_by_pk_if_claimable<C, #pk_param>(_conn: &mut C, _pk: #pk) -> ::diesel_lease::Result<::core::option::Option<Self>> {
                    ::core::unreachable!()
                }

                pub fn with_locked<C, #pk_param T, E, W>(_conn: &mut C, _pk: #pk, _work: W) -> ::core::result::Result<::core::option::Option<T>, E>
                where
                    C: ::diesel_lease::BorrowConnection,
                    W: ::core::ops::FnOnce(&mut <C as ::diesel_lease::BorrowConnection>::Conn, Self) -> ::core::result::Result<T, E>,
                {
                    ::core::unreachable!()
                }

                pub fn semaphore(#sem_params) -> ::diesel_lease::Result<::diesel_lease::semaphore::Semaphore> {
                    ::core::unreachable!()
                }

                pub fn rw_lock(#rw_params) -> ::diesel_lease::Result<::diesel_lease::semaphore::RwLock> {
                    ::core::unreachable!()
                }

                pub fn lock_by_pk_if_null<C, #pk_param>(_conn: &mut C, _pk: #pk) -> ::diesel_lease::Result<::core::option::Option<Self>> {
                    ::core::unreachable!()
                }

                pub fn with_locked_if_null<C, #pk_param T, E, W>(_conn: &mut C, _pk: #pk, _work: W) -> ::core::result::Result<::core::option::Option<T>, E>
                where
                    C: ::diesel_lease::BorrowConnection,
                    W: ::core::ops::FnOnce(&mut <C as ::diesel_lease::BorrowConnection>::Conn, Self) -> ::core::result::Result<T, E>,
                {
                    ::core::unreachable!()
                }
            }
        };
    }
}

/// `Keyed::Pk` when the struct has a field for every primary-key column. Left generic, a key
/// written `"name".into()` would need a type annotation: one more error at the call.
fn known_key_type(input: &DeriveInput, attrs: &StructAttrs) -> Option<TokenStream> {
    let fields = model::struct_fields(input).ok()?;
    let tys = model::primary_key(input, &attrs.diesel)
        .iter()
        .map(|col| model::field(&fields, col).map(|f| &f.ty))
        .collect::<Option<Vec<_>>>()?;
    Some(expand::key_type(&tys))
}

/// The row `insert_once` returns, when the `insert_once` key parsed. Left generic,
/// `outcome == InsertOutcome::AlreadyExists` or `row.id` would need a type annotation.
fn known_insert_once_row(attrs: &StructAttrs) -> Option<TokenStream> {
    let insert_once = attrs.claimable.insert_once.as_ref()?;
    Some(expand::insert_once_row(insert_once.value.as_ref()))
}
