//! libpq's connection string: the network settings `pool::build_pool` adds to it.
//!
//! libpq reads a reply with `poll` and no timeout: a server that falls silent (its host gone, a
//! network partition that swallows packets without closing anything) keeps the caller waiting
//! until the operating system gives the connection up, which by Linux's defaults takes 15
//! minutes for unacknowledged data and over two hours for an idle connection. These settings
//! make the kernel give it up within about 20 s either way; the call then fails with
//! `Error::ConnectionLost`.

use std::borrow::Cow;

/// The settings added where the connection string does not set them, with their values:
/// - `keepalives=1`, `keepalives_idle=5`, `keepalives_interval=5`, `keepalives_count=3`: an
///   idle connection (one waiting for a reply the server never sends) is probed after 5 s of
///   silence, then every 5 s, and given up after 3 unanswered probes;
/// - `tcp_user_timeout=20000` (ms): data sent but not acknowledged for 20 s (a request into a
///   partition) gives the connection up; on Linux it also caps the keepalive probing at 20 s;
/// - `connect_timeout=10` (s): a connection attempt, per host, fails after 10 s.
pub(crate) const SETTINGS: [(&str, &str); 6] = [
    ("keepalives", "1"),
    ("keepalives_idle", "5"),
    ("keepalives_interval", "5"),
    ("keepalives_count", "3"),
    ("tcp_user_timeout", "20000"),
    ("connect_timeout", "10"),
];

/// `url` (a `postgres://` URI or a `key=value` string) with each of [`SETTINGS`] that it does
/// not set added. `connect_timeout` is also left out when `PGCONNECT_TIMEOUT` is set, and a
/// string that names a `service` (or `PGSERVICE` is set) is returned as it is: its service file
/// may set these, and a setting in the URL would override it. A string libpq would refuse is
/// returned as it is too, for libpq to say what is wrong.
pub(crate) fn with_network_settings(url: &str) -> Cow<'_, str> {
    let env = |key: &str| std::env::var_os(key).is_some_and(|v| !v.is_empty());
    with_settings(url, &env)
}

fn with_settings<'a>(url: &'a str, env: &dyn Fn(&str) -> bool) -> Cow<'a, str> {
    let uri = url.starts_with("postgres://") || url.starts_with("postgresql://");
    let keys = if uri {
        uri_keys(url)
    } else {
        conninfo_keys(url)
    };
    let Some(keys) = keys else {
        return Cow::Borrowed(url);
    };
    if env("PGSERVICE") || keys.iter().any(|k| k == "service") {
        return Cow::Borrowed(url);
    }
    let missing: Vec<_> = SETTINGS
        .iter()
        .filter(|(key, _)| !keys.iter().any(|k| k == key))
        .filter(|(key, _)| !(*key == "connect_timeout" && env("PGCONNECT_TIMEOUT")))
        .collect();
    if missing.is_empty() {
        return Cow::Borrowed(url);
    }
    if !uri {
        let mut out = url.trim_end().to_owned();
        for (key, value) in missing {
            out.push_str(&format!(" {key}={value}"));
        }
        return Cow::Owned(out);
    }
    // Parameters go before a fragment, after the query if there is one.
    let (head, fragment) = url.split_at(url.find('#').unwrap_or(url.len()));
    let mut out = head.to_owned();
    let mut separator = match head.find('?') {
        None => '?',
        Some(q) if q + 1 == head.len() || head.ends_with('&') => '\0',
        Some(_) => '&',
    };
    for (key, value) in missing {
        if separator != '\0' {
            out.push(separator);
        }
        out.push_str(&format!("{key}={value}"));
        separator = '&';
    }
    out.push_str(fragment);
    Cow::Owned(out)
}

/// The parameter names in a URI's query.
fn uri_keys(url: &str) -> Option<Vec<String>> {
    let head = &url[..url.find('#').unwrap_or(url.len())];
    let Some((_, query)) = head.split_once('?') else {
        return Some(Vec::new());
    };
    Some(
        query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| pair.split_once('=').map_or(pair, |(key, _)| key))
            .map(str::to_owned)
            .collect(),
    )
}

/// The keys of a `key=value` string, read as libpq reads it (values may be single-quoted, with
/// backslash escapes); `None` when it does not parse.
fn conninfo_keys(conninfo: &str) -> Option<Vec<String>> {
    let mut keys = Vec::new();
    let mut chars = conninfo.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Some(keys);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        chars.next_if_eq(&'=')?;
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next()? {
                    '\\' => {
                        chars.next()?;
                    }
                    '\'' => break,
                    _ => {}
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    chars.next();
                }
            }
        }
        keys.push(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &str = "keepalives=1&keepalives_idle=5&keepalives_interval=5&keepalives_count=3\
                       &tcp_user_timeout=20000&connect_timeout=10";

    fn add(url: &str) -> String {
        with_settings(url, &|_| false).into_owned()
    }

    #[test]
    fn a_uri_gets_every_setting_it_lacks() {
        assert_eq!(
            add("postgres://u@h:5432/db"),
            format!("postgres://u@h:5432/db?{ALL}")
        );
        assert_eq!(
            add("postgresql://u@h/db?sslmode=require"),
            format!("postgresql://u@h/db?sslmode=require&{ALL}")
        );
        assert_eq!(add("postgres://h/db?"), format!("postgres://h/db?{ALL}"));
        assert_eq!(
            add("postgres://h/db?a=1&"),
            format!("postgres://h/db?a=1&{ALL}")
        );
    }

    #[test]
    fn settings_of_the_users_own_stay() {
        let url = "postgres://h,h2/db?keepalives_idle=60&target_session_attrs=read-write\
                   &tcp_user_timeout=0";
        let out = add(url);
        assert!(out.starts_with(url));
        assert!(!out.contains("keepalives_idle=5"));
        assert!(!out.contains("tcp_user_timeout=20000"));
        assert!(out.ends_with(
            "&keepalives=1&keepalives_interval=5&keepalives_count=3&connect_timeout=10"
        ));
        let all = format!("postgres://h/db?{ALL}");
        assert_eq!(add(&all), all, "nothing to add");
    }

    #[test]
    fn a_conninfo_string_gets_them_as_key_value_pairs() {
        assert_eq!(
            add("host=h dbname='my db' password='it\\'s' "),
            "host=h dbname='my db' password='it\\'s' keepalives=1 keepalives_idle=5 \
             keepalives_interval=5 keepalives_count=3 tcp_user_timeout=20000 connect_timeout=10"
        );
        let out = add("host = h keepalives_count =9 connect_timeout= 3");
        assert!(!out.contains("keepalives_count=3") && !out.contains("connect_timeout=10"));
        assert!(out.contains(" keepalives_idle=5"));
    }

    #[test]
    fn what_libpq_would_refuse_or_a_service_is_left_alone() {
        assert_eq!(add("host=h dbname='open"), "host=h dbname='open");
        assert_eq!(add("just-a-name"), "just-a-name");
        assert_eq!(add("service=prod"), "service=prod");
        assert_eq!(
            add("postgres:///db?service=prod"),
            "postgres:///db?service=prod"
        );
        let pgservice = |key: &str| key == "PGSERVICE";
        assert_eq!(with_settings("host=h", &pgservice), "host=h");
        let env_timeout = |key: &str| key == "PGCONNECT_TIMEOUT";
        assert!(!with_settings("host=h", &env_timeout).contains("connect_timeout"));
    }

    #[test]
    fn a_fragment_stays_last() {
        assert_eq!(add("postgres://h/db#x"), format!("postgres://h/db?{ALL}#x"));
    }
}
