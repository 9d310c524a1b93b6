//! State values as SQL constants.
//!
//! The ready/claimed/done/failed states are constants of the model, so the claim and completion
//! statements carry them in their text (`status = 'ready'`) instead of as bind parameters: the
//! text is then the same on every call (Diesel prepares it once per connection) and PostgreSQL
//! can plan it once against a partial index `WHERE status = 'ready'`, which a bound `$1` never
//! matches. A `NULL` state compares as `IS NULL` and is written as `= NULL` only in `SET`.

use diesel::backend::Backend;
use diesel::query_builder::AstPass;
use diesel::QueryResult;

/// One state value as SQL text: `'text'` (quotes doubled), an integer, `TRUE`/`FALSE`, or `NULL`.
///
/// `#[derive(Claimable)]` writes these from the attribute's literals, escaped at compile time.
/// [`StateLiteral::sql`] checks its argument when evaluated in a constant, so a malformed
/// literal is a compile error, never SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateLiteral(Option<&'static str>);

impl StateLiteral {
    /// SQL `NULL`: compared with `IS NULL`.
    pub const NULL: StateLiteral = StateLiteral(None);

    /// A literal's SQL text. Accepts only `'…'` with every inner `'` doubled and no `\` or NUL
    /// (which MySQL and PostgreSQL may read as escapes), an optionally negative decimal integer,
    /// or `TRUE`/`FALSE`; panics otherwise (a compile error in a `const`).
    pub const fn sql(text: &'static str) -> StateLiteral {
        assert!(
            is_safe_literal(text.as_bytes()),
            "not a safely quoted SQL literal"
        );
        StateLiteral(Some(text))
    }

    /// [`StateLiteral::sql`] checked when called instead of when compiled, for a tool that
    /// describes a model at run time (the operator's `doctor`): `None` for text `sql` refuses.
    pub fn checked(text: &'static str) -> Option<StateLiteral> {
        is_safe_literal(text.as_bytes()).then_some(StateLiteral(Some(text)))
    }

    /// The SQL text of a text state, as `#[derive(Claimable)]` writes it: `'value'` with every
    /// `'` doubled. `None` for text with a backslash or NUL, which the derive refuses too (they
    /// are not quoted the same way on every backend).
    pub fn quote_text(value: &str) -> Option<String> {
        (!value.contains(['\\', '\0'])).then(|| format!("'{}'", value.replace('\'', "''")))
    }

    /// The SQL text of a value (`'ready'`, `42`, `TRUE`); `None` for `NULL`.
    pub const fn as_sql(self) -> Option<&'static str> {
        self.0
    }

    /// Whether this is SQL `NULL`.
    pub const fn is_null(self) -> bool {
        self.0.is_none()
    }

    /// The value, as in `SET col = <value>`.
    pub(crate) fn push<DB: Backend>(self, out: &mut AstPass<'_, '_, DB>) {
        out.push_sql(self.0.unwrap_or("NULL"));
    }

    /// `col = <value>`, or `col IS NULL`.
    pub(crate) fn push_eq<DB: Backend>(
        self,
        out: &mut AstPass<'_, '_, DB>,
        col: &str,
    ) -> QueryResult<()> {
        out.push_identifier(col)?;
        match self.0 {
            Some(v) => {
                out.push_sql(" = ");
                out.push_sql(v);
            }
            None => out.push_sql(" IS NULL"),
        }
        Ok(())
    }

    /// `col` is one of `values`: `col = 'a'`, `col IN ('a', 'b')`, `col IS NULL`, or
    /// `(col IS NULL OR col IN (…))`. A single value is written as `=`, the form a partial
    /// index's predicate has.
    pub(crate) fn push_in<DB: Backend>(
        values: &[StateLiteral],
        out: &mut AstPass<'_, '_, DB>,
        col: &str,
    ) -> QueryResult<()> {
        let null = values.iter().any(|v| v.is_null());
        let mut texts = values.iter().filter_map(|v| v.0);
        let Some(first) = texts.next() else {
            if null {
                return StateLiteral::NULL.push_eq(out, col);
            }
            out.push_sql("1 = 0");
            return Ok(());
        };
        if null {
            out.push_sql("(");
            StateLiteral::NULL.push_eq(out, col)?;
            out.push_sql(" OR ");
        }
        // Written piece by piece: every claim writes this (twice when Diesel walks the
        // statement for its cache check), and a collected list cost an allocation each time.
        let mut rest = texts.peekable();
        if rest.peek().is_none() {
            StateLiteral(Some(first)).push_eq(out, col)?;
        } else {
            out.push_identifier(col)?;
            out.push_sql(" IN (");
            out.push_sql(first);
            for text in rest {
                out.push_sql(", ");
                out.push_sql(text);
            }
            out.push_sql(")");
        }
        if null {
            out.push_sql(")");
        }
        Ok(())
    }
}

const fn is_safe_literal(b: &[u8]) -> bool {
    if is_keyword(b, b"TRUE") || is_keyword(b, b"FALSE") {
        return true;
    }
    if b.len() >= 2 && b[0] == b'\'' && b[b.len() - 1] == b'\'' {
        let mut i = 1;
        while i < b.len() - 1 {
            match b[i] {
                0 | b'\\' => return false,
                b'\'' if b[i + 1] == b'\'' && i + 1 < b.len() - 1 => i += 2,
                b'\'' => return false,
                _ => i += 1,
            }
        }
        return true;
    }
    let start = if !b.is_empty() && b[0] == b'-' { 1 } else { 0 };
    if b.len() == start {
        return false;
    }
    let mut i = start;
    while i < b.len() {
        if !b[i].is_ascii_digit() {
            return false;
        }
        i += 1;
    }
    true
}

const fn is_keyword(b: &[u8], k: &[u8]) -> bool {
    if b.len() != k.len() {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if b[i] != k[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{is_safe_literal, StateLiteral};

    #[test]
    fn text_is_quoted_as_the_derive_quotes_it() {
        assert_eq!(
            StateLiteral::quote_text("ready").as_deref(),
            Some("'ready'")
        );
        assert_eq!(StateLiteral::quote_text("it's").as_deref(), Some("'it''s'"));
        assert_eq!(StateLiteral::quote_text("a\\b"), None);
        assert_eq!(StateLiteral::quote_text("a\0b"), None);
        for value in ["ready", "it's", "'; DROP TABLE jobs; --", "''", ""] {
            let text: &'static str =
                Box::leak(StateLiteral::quote_text(value).unwrap().into_boxed_str());
            assert!(StateLiteral::checked(text).is_some(), "{text}");
        }
        assert_eq!(StateLiteral::checked("ready"), None);
        assert_eq!(StateLiteral::checked("1 OR 1=1"), None);
    }

    #[test]
    fn only_safely_quoted_literals_are_accepted() {
        for ok in [
            "'ready'", "'it''s'", "''", "42", "-7", "TRUE", "FALSE", "'ünï'",
        ] {
            assert!(is_safe_literal(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "'it's'", "'a\\'", "'\0'", "ready", "'open", "-", "", "1 OR 1=1", "true", "'''",
        ] {
            assert!(!is_safe_literal(bad.as_bytes()), "{bad}");
        }
    }

    /// Every form `push_in` writes, as SQLite's query builder sees it.
    #[cfg(feature = "sqlite")]
    #[test]
    fn a_state_list_is_written_in_each_of_its_forms() {
        use diesel::query_builder::{AstPass, QueryFragment};
        use diesel::sqlite::Sqlite;
        use diesel::QueryResult;

        struct In(Vec<StateLiteral>);
        impl QueryFragment<Sqlite> for In {
            fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Sqlite>) -> QueryResult<()> {
                StateLiteral::push_in(&self.0, &mut out, "state")
            }
        }
        let text = |values: &[StateLiteral]| {
            diesel::debug_query::<Sqlite, _>(&In(values.to_vec()))
                .to_string()
                .replace(" -- binds: []", "")
        };
        let (a, b, c) = (
            StateLiteral(Some("'a'")),
            StateLiteral(Some("'b'")),
            StateLiteral(Some("'c'")),
        );
        let null = StateLiteral::NULL;
        assert_eq!(text(&[]), "1 = 0");
        assert_eq!(text(&[null]), "`state` IS NULL");
        assert_eq!(text(&[a]), "`state` = 'a'");
        assert_eq!(text(&[a, b, c]), "`state` IN ('a', 'b', 'c')");
        assert_eq!(text(&[null, a]), "(`state` IS NULL OR `state` = 'a')");
        assert_eq!(
            text(&[a, null, b]),
            "(`state` IS NULL OR `state` IN ('a', 'b'))"
        );
    }
}
