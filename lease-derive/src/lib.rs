//! Internal: the `#[derive(Claimable)]` macro of diesel-lease. Depend on `diesel-lease` instead.
