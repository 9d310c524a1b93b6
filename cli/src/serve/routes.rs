//! The actions' paths and names: the forms the page draws post to them, and
//! [`actions`](super::actions) answers them.

/// Where actions are posted: `/actions/<name>`.
pub(super) const PREFIX: &str = "/actions/";

/// Moves every dead row of a `--table` back to ready (attempts reset next to an owner column),
/// in batches.
pub(super) const RETRY_DEAD: &str = "retry-dead";

/// Pauses claims of a `--table` (or of its rows of one key).
pub(super) const PAUSE: &str = "pause";
/// Resumes them.
pub(super) const RESUME: &str = "resume";
/// Cancels one row of a `--table` by its primary key.
pub(super) const CANCEL: &str = "cancel";

/// Force-releases lease `name` (and fences its holder).
pub(super) const RELEASE_LEASE: &str = "release-lease";
/// Force-releases semaphore ticket `ticket`.
pub(super) const RELEASE_TICKET: &str = "release-ticket";
