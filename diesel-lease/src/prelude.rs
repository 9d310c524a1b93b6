//! What almost every user of diesel-lease imports: `use diesel_lease::prelude::*;`.
//!
//! It brings the derive (and its trait) `Claimable`, and the extension traits that give models
//! their operations — as `use diesel::prelude::*` brings `QueryDsl` and `RunQueryDsl`. The
//! traits are imported for their methods; their names rarely need to be written. It also brings
//! [`InsertOutcome`], which every caller of `insert_once` matches on.

pub use crate::dsl::{
    ClaimDsl, ClaimIfNullDsl, ControlTableDsl, FinishDsl, InsertOnceDsl, JobLeaseDsl,
    OneResourceControlTableDsl,
};
pub use crate::{Claimable, Held, InsertOutcome};
