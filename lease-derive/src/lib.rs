//! Internal: the derives of diesel-lease (`Claimable`, `ClaimIfNull`, `InsertOnce`, `JobLease`,
//! `ControlTable`). Depend on `diesel-lease` instead; the attribute grammar is documented there.

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

use attrs::Capability;

/// Claims of a Diesel model's rows: implements `Claimable` (and `Keyed`) from
/// `#[claimable(state = …, ready = …, claimed = …, …)]`; the operations come from
/// `diesel_lease::prelude`'s extension traits.
///
/// See `diesel_lease::Claimable` for the attribute grammar. Declares `diesel` as a helper
/// attribute too: every derive reads `#[diesel(table_name, primary_key, column_name)]`, so a
/// model deriving only ours may still carry them.
#[proc_macro_derive(Claimable, attributes(claimable, diesel))]
pub fn derive_claimable(input: TokenStream) -> TokenStream {
    derive(input.into(), Capability::Claim).into()
}

/// At-most-once work on a nullable column: implements `ClaimIfNull` from
/// `#[claim_if_null(column = …)]`. See `diesel_lease::ClaimIfNull`.
#[proc_macro_derive(ClaimIfNull, attributes(claim_if_null, diesel))]
pub fn derive_claim_if_null(input: TokenStream) -> TokenStream {
    derive(input.into(), Capability::ClaimIfNull).into()
}

/// Follow-up inserts where a duplicate is an outcome: implements `InsertOnce` for an
/// `Insertable`, optionally `#[insert_once(returning = Model)]`. See `diesel_lease::InsertOnce`.
#[proc_macro_derive(InsertOnce, attributes(insert_once, diesel))]
pub fn derive_insert_once(input: TokenStream) -> TokenStream {
    derive(input.into(), Capability::InsertOnce).into()
}

/// A scheduled job's lease on the user's own table: implements `JobLease` from
/// `#[job_lease(holder = …, started_at = …, next_run = …)]`. See `diesel_lease::JobLease`.
#[proc_macro_derive(JobLease, attributes(job_lease, diesel))]
pub fn derive_job_lease(input: TokenStream) -> TokenStream {
    derive(input.into(), Capability::JobLease).into()
}

/// A semaphore's control table: implements `ControlTable` from
/// `#[control_table(ticket = …, owner = …, …)]`. See `diesel_lease::ControlTable`.
#[proc_macro_derive(ControlTable, attributes(control_table, diesel))]
pub fn derive_control_table(input: TokenStream) -> TokenStream {
    derive(input.into(), Capability::ControlTable).into()
}

fn derive(input: proc_macro2::TokenStream, capability: Capability) -> proc_macro2::TokenStream {
    syn::parse2::<syn::DeriveInput>(input)
        .map(|input| match model::Model::from_input(&input, capability) {
            Ok(model) => expand::expand(&model),
            // Still implement the traits, so that the mistake is not reported again at every call.
            Err(errors) => fallback::expand(&input, capability, errors),
        })
        .unwrap_or_else(syn::Error::into_compile_error)
}
