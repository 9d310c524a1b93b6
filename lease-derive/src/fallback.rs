//! What the derive emits when it reports errors (thiserror's `fallback.rs`): the errors, and stub
//! impls of the capability traits, with placeholder columns and `unreachable!()` bodies. The
//! operations are extension traits blanket-implemented over those, so a mistake in the
//! attribute is reported once, at the attribute, and not again as "no function or associated
//! item named `claim`" or "the trait bound `Job: Claimable` is not satisfied" at every call.
//!
//! The stubs use the types that did parse (the table, the key, `insert_once`'s row), so calls
//! that need them to infer types add no errors either. Nothing here runs: the crate does not
//! compile while the errors stand.

use proc_macro2::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput};

use crate::attrs::{Capability, Errors, StructAttrs};
use crate::{expand, model};

/// The errors, plus the stub impls when `input` is a struct (there is nothing to implement the
/// traits for otherwise).
pub(crate) fn expand(
    input: &DeriveInput,
    capability: Capability,
    errors: syn::Error,
) -> TokenStream {
    let errors = errors.into_compile_error();
    if !matches!(input.data, Data::Struct(_)) {
        return errors;
    }
    // Parsed again, errors ignored: they are the ones being reported.
    let attrs = StructAttrs::parse(&input.attrs, capability, &mut Errors::default());
    let skeleton = model::Model::skeleton(input, &attrs);
    let name = &input.ident;
    let generics = &input.generics;
    let (impl_g, ty_g, where_g) = generics.split_for_impl();
    let table = &skeleton.table;
    let private = quote!(::diesel_lease::__private);
    let none = quote!(::core::option::Option::None);

    // The key only where the model's key columns all have fields (the traits below need it).
    let has_key = !skeleton.pk.is_empty();
    let keyed = (has_key && skeleton.keyed).then(|| expand::expand_keyed(&skeleton));
    // This derive's capability only (the model's other derives implement theirs), with every
    // marker of it: the marker asked for may be the one whose key is misspelled.
    let own = match capability {
        Capability::Claim => skeleton.pk.first().map(|(key_column, key_field)| {
            let key_ty = &key_field.ty;
            let markers = [
                "HasDoneState",
                "HasFailedState",
                "HasClaimedAt",
                "HasAttempts",
                "HasCancelState",
                "Pausable",
                "HasPauseKey",
            ]
            .map(|t| expand::marker(name, generics, t));
            quote! {
                #[automatically_derived]
                impl #impl_g #private::ClaimOrderKey for #name #ty_g #where_g {
                    type OrderColumn = #table::#key_column;
                    type OrderValue = #key_ty;
                    fn order_value(&self) -> &Self::OrderValue {
                        ::core::unreachable!()
                    }
                }

                #[automatically_derived]
                impl #impl_g #private::Claimable for #name #ty_g #where_g {
                    type ClaimedAtSql = ::diesel::sql_types::Timestamp;
                    const STATE: &'static str = "";
                    const OWNER: ::core::option::Option<&'static str> = #none;
                    const CLAIMED_AT: ::core::option::Option<&'static str> = #none;
                    const ATTEMPTS: ::core::option::Option<&'static str> = #none;
                    const ORDER: &'static [(&'static str, #private::SortOrder)] = &[];
                    const CLAIM_TIMEOUT_MICROS: ::core::option::Option<i64> = #none;
                    const MAX_ATTEMPTS: ::core::option::Option<i64> = #none;
                    const READY_SQL: &'static [#private::StateLiteral] = &[];
                    const CLAIMED_SQL: #private::StateLiteral = #private::StateLiteral::NULL;
                    const DONE_SQL: ::core::option::Option<#private::StateLiteral> = #none;
                    const FAILED_SQL: ::core::option::Option<#private::StateLiteral> = #none;
                    fn owner(&self) -> ::core::option::Option<&str> {
                        ::core::unreachable!()
                    }
                    fn attempts(&self) -> ::core::option::Option<i64> {
                        ::core::unreachable!()
                    }
                }
                #(#markers)*
            }
        }),
        Capability::ClaimIfNull => has_key.then(|| {
            quote! {
                #[automatically_derived]
                impl #impl_g #private::ClaimIfNull for #name #ty_g #where_g {
                    type NullColumnSql = ::diesel::sql_types::Nullable<::diesel::sql_types::Text>;
                    const NULL_COLUMN: &'static str = "";
                }
            }
        }),
        Capability::JobLease => has_key.then(|| {
            quote! {
                #[automatically_derived]
                impl #impl_g #private::JobLease for #name #ty_g #where_g {
                    type StartedAtSql = ::diesel::sql_types::Nullable<::diesel::sql_types::Timestamp>;
                    type NextRunSql = ::diesel::sql_types::Nullable<::diesel::sql_types::Timestamp>;
                    const HOLDER: &'static str = "";
                    const STARTED_AT: &'static str = "";
                    const NEXT_RUN: ::core::option::Option<&'static str> = #none;
                }
            }
        }),
        Capability::InsertOnce => {
            let returning = attrs
                .claimable
                .insert_once
                .as_ref()
                .and_then(|r| r.value.as_ref());
            let (row, mode) = (
                expand::insert_once_row(returning),
                expand::insert_once_mode(returning),
            );
            Some(quote! {
                #[automatically_derived]
                impl #impl_g #private::InsertOnce for #name #ty_g #where_g {
                    type Table = #table::table;
                    type Mode = #mode;
                    type Row = #row;
                }
            })
        }
        Capability::ControlTable => {
            // A control table without a resource column serves one resource.
            let one_resource = matches!(
                attrs.claimable.semaphore.as_ref(),
                Some(s) if s.value.resource.is_none()
            );
            let resource_marker = expand::marker(
                name,
                generics,
                if one_resource {
                    "OneResource"
                } else {
                    "ResourceColumn"
                },
            );
            let mode_marker = expand::marker(name, generics, "HasModeColumn");
            Some(quote! {
                #[automatically_derived]
                impl #impl_g #private::ControlTable for #name #ty_g #where_g {
                    type Table = #table::table;
                    const NAME: &'static str = "";
                    const TICKET: &'static str = "";
                    const OWNER: &'static str = "";
                    const RESOURCE: ::core::option::Option<&'static str> = #none;
                    const MODE: ::core::option::Option<#private::ModeColumn> = #none;
                    const GRANTED: &'static str = "";
                    const EXPIRES_AT: &'static str = "";
                }
                #resource_marker
                #mode_marker
            })
        }
    };

    quote! {
        #errors

        #[allow(non_upper_case_globals, unused_qualifications, clippy::all)]
        const _: () = {
            #keyed
            #own
        };
    }
}
