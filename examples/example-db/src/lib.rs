//! Where the examples keep their tables, so that running one never touches a table of yours.
//!
//! Diesel users usually have `DATABASE_URL` exported for their own application, and the examples'
//! tables have the names of the articles they come from (`importjobs`, `test`, `action`, …). So an
//! example never creates, changes or drops anything outside a place of its own:
//!
//! - **`DATABASE_URL` unset** (or empty): a SQLite file in a new temporary directory, deleted at
//!   the end.
//! - **`DATABASE_URL=postgres://…`**: a new schema in that database, named
//!   `diesel_lease_example_<example>_<pid>` (created with `CREATE SCHEMA`, which fails rather
//!   than reuse an existing one), and every connection of the example, in every process it
//!   starts, gets `search_path` set to that schema alone through the URL's `options` parameter.
//!   The example's tables, and diesel-lease's own tables when the example runs the migrations, are
//!   created there; the schema is dropped (`DROP SCHEMA … CASCADE`) when the example ends. An
//!   example killed before its end leaves the schema behind; its comment says which example
//!   made it, and dropping it is safe.
//! - **Any other `DATABASE_URL`**: a clear error, before anything is created.
//!
//! Notifications are not schema-scoped in PostgreSQL: a worker of yours that `LISTEN`s on the
//! same table or semaphore name as an example may be woken once for nothing, and find no work.

use std::fmt;

use diesel::connection::SimpleConnection;
use diesel::Connection;

/// Errors of the examples: any error, sent between threads.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The backend an example runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in a temporary directory.
    Sqlite,
    /// A schema of its own in `DATABASE_URL`'s PostgreSQL database.
    Postgres,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
        })
    }
}

/// The database an example runs in; removed again when dropped.
#[derive(Debug)]
pub struct ExampleDb {
    url: String,
    backend: Backend,
    place: String,
    cleanup: Cleanup,
}

#[derive(Debug)]
enum Cleanup {
    /// The SQLite file's directory, deleted when dropped.
    TempDir(#[allow(dead_code)] tempfile::TempDir),
    /// The schema to drop, and the URL to reach it without the `search_path` option.
    Schema { base_url: String, schema: String },
}

/// The prefix of every schema an example creates.
pub const SCHEMA_PREFIX: &str = "diesel_lease_example_";

impl ExampleDb {
    /// The place for `example` (its package name), chosen by `DATABASE_URL` as the module
    /// documentation says. Prints nothing; [`ExampleDb::describe`] says where it is.
    pub fn open(example: &str) -> Result<Self, BoxError> {
        match std::env::var("DATABASE_URL") {
            Ok(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Self::postgres(example, url)
            }
            Ok(url) if !url.is_empty() => Err(format!(
                "DATABASE_URL is set to a URL this example does not run on (scheme `{}`): \
                 the examples run on PostgreSQL (postgres://… or postgresql://…), \
                 or on a temporary SQLite file when DATABASE_URL is unset",
                url.split_once(':')
                    .map_or(url.as_str(), |(scheme, _)| scheme)
            )
            .into()),
            Ok(_) | Err(std::env::VarError::NotPresent) => Self::sqlite(example),
            Err(e) => Err(format!("DATABASE_URL: {e}").into()),
        }
    }

    fn sqlite(example: &str) -> Result<Self, BoxError> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{example}-"))
            .tempdir()?;
        let path = dir.path().join(format!("{example}.db"));
        Ok(ExampleDb {
            url: path.display().to_string(),
            backend: Backend::Sqlite,
            place: format!("SQLite file {} (deleted at the end)", path.display()),
            cleanup: Cleanup::TempDir(dir),
        })
    }

    fn postgres(example: &str, base_url: String) -> Result<Self, BoxError> {
        if query_params(&base_url).any(|key| key == "options") {
            return Err(
                "DATABASE_URL already has an `options` parameter; the examples use it \
                        to keep their tables in a schema of their own: remove it to run them"
                    .into(),
            );
        }
        let schema = schema_name(example, std::process::id());
        let mut conn = diesel::PgConnection::establish(&base_url)?;
        // `schema` is made of [a-z0-9_] only (see `schema_name`), and quoted anyway.
        conn.batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\";
             COMMENT ON SCHEMA \"{schema}\" IS 'created by the diesel-lease example {example}; \
             dropped when it ends; safe to drop';"
        ))
        .map_err(|e| format!("cannot create the example's schema `{schema}`: {e}"))?;
        let separator = if base_url.contains('?') { '&' } else { '?' };
        Ok(ExampleDb {
            url: format!("{base_url}{separator}options=-csearch_path%3D{schema}"),
            backend: Backend::Postgres,
            place: format!(
                "PostgreSQL, schema `{schema}` of DATABASE_URL's database \
                 (its own; dropped at the end; no other table is touched)"
            ),
            cleanup: Cleanup::Schema { base_url, schema },
        })
    }

    /// The URL every connection of the example uses, in this process and in the processes it
    /// starts: the SQLite file's path, or `DATABASE_URL` with `search_path` set to the schema.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Where the example's tables are, for its first line of output (never prints a password).
    pub fn describe(&self) -> &str {
        &self.place
    }
}

impl Drop for ExampleDb {
    fn drop(&mut self) {
        if let Cleanup::Schema { base_url, schema } = &self.cleanup {
            let dropped = diesel::PgConnection::establish(base_url)
                .map_err(|e| e.to_string())
                .and_then(|mut conn| {
                    conn.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                        .map_err(|e| e.to_string())
                });
            if let Err(e) = dropped {
                eprintln!("could not drop the example's schema `{schema}` ({e}); drop it by hand");
            }
        }
    }
}

/// `diesel_lease_example_<example>_<pid>`, with every character outside `[a-z0-9]` of the
/// example's name turned into `_`, so the name needs no quoting and cannot inject anything.
pub fn schema_name(example: &str, pid: u32) -> String {
    let example: String = example
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .collect();
    format!("{SCHEMA_PREFIX}{example}_{pid}")
}

/// The keys of a URL's query parameters.
fn query_params(url: &str) -> impl Iterator<Item = &str> {
    url.split_once('?')
        .map(|(_, query)| query)
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| pair.split('=').next())
        .filter(|key| !key.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert_eq!(
            schema_name("claim-jobs", 42),
            "diesel_lease_example_claim_jobs_42"
        );
        assert_eq!(
            schema_name("A\"; DROP x", 7),
            "diesel_lease_example_a___drop_x_7"
        );
    }

    #[test]
    fn query_parameters_are_found() {
        let keys: Vec<_> = query_params("postgres://u@h/db?sslmode=disable&options=-c").collect();
        assert_eq!(keys, ["sslmode", "options"]);
        assert_eq!(query_params("postgres://u@h/db").count(), 0);
    }
}
