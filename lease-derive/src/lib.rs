//! Internal: the `#[derive(Claimable)]` macro of diesel-lease. Depend on `diesel-lease` instead;
//! the attribute grammar is documented there.

mod attrs;
mod expand;
mod fallback;
mod fields;
mod fit;
mod literal;
mod model;
#[cfg(test)]
mod tests;
mod ty;
mod valid;

use proc_macro::TokenStream;

/// Implements diesel-lease's traits (`Claimable`, `ClaimIfNull`, `InsertOnce`, `JobLease`, `ControlTable`, …)
/// for a Diesel model; the operations come from `diesel_lease::prelude`'s extension traits.
///
/// See `diesel_lease::Claimable` for the attribute grammar and what each attribute enables.
/// Declares `diesel` as a helper attribute too: the derive reads `#[diesel(table_name, primary_key,
/// column_name)]`, so a model deriving only `Claimable` may still carry them.
#[proc_macro_derive(Claimable, attributes(claimable, diesel))]
pub fn derive_claimable(input: TokenStream) -> TokenStream {
    derive_claimable_inner(input.into()).into()
}

fn derive_claimable_inner(input: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    syn::parse2::<syn::DeriveInput>(input)
        .map(|input| match model::Model::from_input(&input) {
            Ok(model) => expand::expand(&model),
            // Still implement the traits, so that the mistake is not reported again at every call.
            Err(errors) => fallback::expand(&input, errors),
        })
        .unwrap_or_else(syn::Error::into_compile_error)
}
