/// A fencing token: a number that strictly increases with every grant of the same lock.
///
/// Pass it along with every write to the protected resource and make the resource reject writes
/// whose token is lower than the last one it accepted (`UPDATE … WHERE last_token < $token`). A
/// holder that was paused past its lease then cannot overwrite the work of the holder after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(pub i64);

impl FencingToken {
    /// The token as stored in the database.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}
