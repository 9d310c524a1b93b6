//! Snapshots of the expansion for representative models (insta). Review a changed snapshot as
//! generated code a user will compile: absolute paths only, `#[automatically_derived]`, all of it
//! inside one `const _: () = { … };`.

use quote::quote;

use crate::derive_claimable_inner;

/// Expands `input` and pretty-prints it; panics with the tokens if the expansion is not a file.
fn expand(input: proc_macro2::TokenStream) -> String {
    let tokens = derive_claimable_inner(input);
    let file = syn::parse2::<syn::File>(tokens.clone())
        .unwrap_or_else(|e| panic!("expansion is not valid Rust ({e}):\n{tokens}"));
    prettyplease::unparse(&file)
}

/// Hygiene rules every expansion must follow, checked on the token text.
fn assert_hygienic(code: &str) {
    assert!(
        code.starts_with("#[allow(") && code.contains("const _: () = {"),
        "not wrapped in `const _: () = {{ … }}`:\n{code}"
    );
    let impls = code.matches("\n    impl").count();
    let derived = code.matches("#[automatically_derived]").count();
    assert_eq!(impls, derived, "every impl is #[automatically_derived]:\n{code}");
    for line in code.lines() {
        for word in ["Option<", "Some(", "None", "Vec<", "vec!", "Clone", "From<", "Result<"] {
            let bare = line.match_indices(word).any(|(i, _)| {
                let before = &line[..i];
                !before.ends_with("::") && !before.ends_with("::option::") && !before.ends_with('_')
            });
            assert!(!bare, "`{word}` without an absolute path in `{line}`");
        }
    }
}

#[test]
fn seed_003_import_job_all_options() {
    let code = expand(quote! {
        #[derive(Debug, Queryable, Selectable, Claimable)]
        #[diesel(table_name = crate::schema::importjobs)]
        #[claimable(
            state = statuscode,
            ready("JOBEXTRACTED", "RETRY"),
            claimed = "EXECUTIONINPROGRESS",
            done = "DONE",
            failed = "FAILED",
            owner = worker,
            claimed_at = claimed_at,
            attempts = attempts,
            timeout_secs = 300,
            max_attempts = 3,
            order_by(priority desc, id)
        )]
        pub struct ImportJob {
            pub id: i64,
            pub statuscode: String,
            pub worker: Option<String>,
            pub claimed_at: Option<NaiveDateTime>,
            pub attempts: i32,
            pub priority: i32,
        }
    });
    assert_hygienic(&code);
    insta::assert_snapshot!(code);
}

#[test]
fn seed_004_bool_state() {
    let code = expand(quote! {
        #[derive(Queryable, Selectable, Claimable)]
        #[diesel(table_name = test)]
        #[claimable(state = processed, ready = false, claimed = true)]
        pub struct Test {
            pub id: i64,
            pub data: String,
            pub processed: bool,
        }
    });
    assert_hygienic(&code);
    insta::assert_snapshot!(code);
}

#[test]
fn seed_002_guard_with_composite_key() {
    let code = expand(quote! {
        #[derive(Queryable, Selectable, Claimable)]
        #[diesel(table_name = mailing, primary_key(campaign_id, user_id))]
        #[claimable(guard = sent_by)]
        pub struct Mailing {
            pub campaign_id: i32,
            pub user_id: i64,
            pub sent_by: Option<String>,
        }
    });
    assert_hygienic(&code);
    insta::assert_snapshot!(code);
}

#[test]
fn seed_002_insert_once_returning() {
    let code = expand(quote! {
        #[derive(Insertable, Claimable)]
        #[diesel(table_name = notification)]
        #[claimable(insert_once(returning = Notification))]
        pub struct NewNotification {
            pub id: i64,
            pub user_id: i64,
            pub previous_notification: i64,
            pub body: String,
        }
    });
    assert_hygienic(&code);
    insta::assert_snapshot!(code);
}

#[test]
fn errors_expand_to_compile_error() {
    let tokens = derive_claimable_inner(quote! {
        #[claimable(stat = status, guard = notified)]
        pub struct Action { pub id: i64, pub notified: Option<i64> }
    });
    let code = tokens.to_string();
    assert!(code.contains("compile_error"), "{code}");
    assert!(code.contains("unknown attribute `stat`"), "{code}");
}
