//! Snapshots of the expansion for representative models (insta). Review a changed snapshot as
//! generated code a user will compile: absolute paths only, `#[automatically_derived]`, all of it
//! inside one `const _: () = { … };`.

use quote::quote;

use crate::derive_claimable_inner;

/// Expands `input`, checks the hygiene rules on the tokens and pretty-prints the result.
fn expand(input: proc_macro2::TokenStream) -> String {
    let tokens = derive_claimable_inner(input);
    assert_hygienic(&tokens);
    let file = syn::parse2::<syn::File>(tokens.clone())
        .unwrap_or_else(|e| panic!("expansion is not valid Rust ({e}):\n{tokens}"));
    prettyplease::unparse(&file)
}

/// Names from the prelude that generated code must spell with an absolute path, because the
/// user's crate may shadow them.
const PRELUDE: &[&str] = &[
    "Option", "Some", "None", "Result", "Ok", "Err", "Vec", "vec", "Clone", "Default", "From",
    "Into", "Sized", "FnOnce", "Fn", "FnMut", "Box", "Send", "Sync",
];

/// Hygiene rules every expansion must follow: one `const _: () = { … };`, every impl
/// `#[automatically_derived]`, prelude names only behind `::` (`::core::option::Option`).
fn assert_hygienic(tokens: &proc_macro2::TokenStream) {
    let item: syn::ItemConst = syn::parse2(tokens.clone())
        .unwrap_or_else(|e| panic!("expansion is not one `const _` item ({e}):\n{tokens}"));
    assert_eq!(item.ident, "_", "the expansion is an anonymous const");
    let syn::Expr::Block(block) = *item.expr else {
        panic!("`const _: () = {{ … }}` expected");
    };
    for stmt in &block.block.stmts {
        if let syn::Stmt::Item(syn::Item::Impl(imp)) = stmt {
            assert!(
                imp.attrs
                    .iter()
                    .any(|a| a.path().is_ident("automatically_derived")),
                "impl without #[automatically_derived]: {}",
                quote!(#imp)
            );
        }
    }
    let mut flat = Vec::new();
    flatten(tokens.clone(), &mut flat);
    for (i, t) in flat.iter().enumerate() {
        let proc_macro2::TokenTree::Ident(id) = t else {
            continue;
        };
        if !PRELUDE.iter().any(|p| id == p) {
            continue;
        }
        let after_colons = i >= 2
            && matches!((&flat[i - 2], &flat[i - 1]),
                (proc_macro2::TokenTree::Punct(a), proc_macro2::TokenTree::Punct(b))
                    if a.as_char() == ':' && b.as_char() == ':');
        assert!(after_colons, "`{id}` without an absolute path (token {i})");
    }
}

fn flatten(tokens: proc_macro2::TokenStream, out: &mut Vec<proc_macro2::TokenTree>) {
    for t in tokens {
        match t {
            proc_macro2::TokenTree::Group(g) => flatten(g.stream(), out),
            t => out.push(t),
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
