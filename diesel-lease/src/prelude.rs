//! What almost every user of diesel-lease imports: `use diesel_lease::prelude::*;`.
//!
//! It brings the derives (`Claimable`, `ClaimIfNull`, `InsertOnce`, `JobLease`,
//! `ControlTable`: one per capability, as Diesel has `Insertable` and `AsChangeset`) and six traits, imported for their methods (their names
//! rarely need to be written), as `use diesel::prelude::*` brings `QueryDsl` and `RunQueryDsl`:
//!
//! | Trait | Gives |
//! |---|---|
//! | [`ClaimDsl`] | `M::claim()`, `M::queue()`, and the operations on one claimed row |
//! | [`FinishDsl`] | `complete`, `fail`, `requeue` on a claimed row or a slice of them |
//! | [`OnceDsl`] | `claim_if_null` and `insert_once`: at-most-once work |
//! | [`JobLeaseDsl`] | `try_acquire_run`, `release_run`: a scheduled job's run on a farm |
//! | [`ControlTableDsl`] | semaphores and reader/writer locks on a control table |
//! | [`Held`] | what every guard answers: `is_lost`, `ensure_held`, `release` |
//!
//! It also brings [`InsertOutcome`], which every caller of `insert_once` matches on. The trait
//! the derive implements is [`crate::Claimable`]; it is not in the prelude, since its items are
//! read by the library, not called.

pub use crate::dsl::{ClaimDsl, ControlTableDsl, FinishDsl, JobLeaseDsl, OnceDsl};
pub use crate::{Held, InsertOutcome};
pub use lease_derive::{ClaimIfNull, Claimable, ControlTable, InsertOnce, JobLease};
