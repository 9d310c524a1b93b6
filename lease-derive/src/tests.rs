//! Snapshots of the expansion for representative models (insta). Review a changed snapshot as
//! generated code a user will compile: absolute paths only, `#[automatically_derived]`, all of it
//! inside one `const _: () = { … };` (after the `compile_error!`s, for input the derive rejects).

use quote::quote;

use crate::attrs::Capability;

/// What `#[derive(Claimable)]` expands `input` to.
fn derive_claimable_inner(input: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    crate::derive(input, Capability::Claim)
}

/// Expands `input` as `#[derive(Claimable)]` does (see [`expand_as`]).
fn expand(input: proc_macro2::TokenStream) -> String {
    expand_as(Capability::Claim, input)
}

/// Expands `input` with the derive of `capability`, checks the hygiene rules on the tokens and
/// pretty-prints the result.
fn expand_as(capability: Capability, input: proc_macro2::TokenStream) -> String {
    let tokens = crate::derive(input, capability);
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

/// Expands an input the derive rejects: its errors, then the fallback's `const _` (checked like a
/// successful expansion), pretty-printed.
fn expand_with_errors(input: proc_macro2::TokenStream) -> String {
    expand_with_errors_as(Capability::Claim, input)
}

/// [`expand_with_errors`] with the derive of `capability`.
fn expand_with_errors_as(capability: Capability, input: proc_macro2::TokenStream) -> String {
    let tokens = crate::derive(input, capability);
    let file = syn::parse2::<syn::File>(tokens.clone())
        .unwrap_or_else(|e| panic!("expansion is not valid Rust ({e}):\n{tokens}"));
    let Some((syn::Item::Const(fallback), errors)) = file.items.split_last() else {
        panic!("the errors are followed by the fallback's `const _`:\n{tokens}");
    };
    assert!(!errors.is_empty(), "no error reported:\n{tokens}");
    for item in errors {
        assert!(
            matches!(item, syn::Item::Macro(m) if m.mac.path.segments.last().is_some_and(|s| s.ident == "compile_error")),
            "only `compile_error!`s before the fallback: {}",
            quote!(#item)
        );
    }
    assert_hygienic(&quote!(#fallback));
    prettyplease::unparse(&file)
}

/// The trait (last path segment) of every impl in the `const _` blocks of `tokens`; `None` for
/// an inherent impl.
fn impls(tokens: &proc_macro2::TokenStream) -> Vec<Option<String>> {
    let file = syn::parse2::<syn::File>(tokens.clone()).expect("valid Rust");
    let mut impls = Vec::new();
    for item in &file.items {
        let syn::Item::Const(c) = item else { continue };
        let syn::Expr::Block(block) = &*c.expr else {
            continue;
        };
        for stmt in &block.block.stmts {
            if let syn::Stmt::Item(syn::Item::Impl(i)) = stmt {
                impls.push(
                    i.trait_
                        .as_ref()
                        .and_then(|(_, path, _)| path.segments.last())
                        .map(|s| s.ident.to_string()),
                );
            }
        }
    }
    impls
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

/// Issue 13: a not-before column (which leads the default order) and a last-error column.
#[test]
fn scheduled_task_with_error_column() {
    let code = expand(quote! {
        #[derive(Queryable, Selectable, Claimable)]
        #[diesel(table_name = tasks)]
        #[claimable(
            state = status, ready = "new", claimed = "running", done = "done", failed = "dead",
            attempts = attempts, available_at = run_at, error = last_error
        )]
        pub struct Task {
            pub id: i64,
            pub status: String,
            pub attempts: i32,
            pub run_at: NaiveDateTime,
            pub last_error: Option<String>,
        }
    });
    insta::assert_snapshot!(code);
}

/// Issue 24: a priority column leads the default order (higher first), then the not-before
/// column, then the key.
#[test]
fn priority_leads_the_default_order() {
    let code = expand(quote! {
        #[derive(Queryable, Selectable, Claimable)]
        #[diesel(table_name = tasks)]
        #[claimable(state = status, ready = "new", claimed = "running", priority = priority, available_at = run_at)]
        pub struct Task {
            pub id: i64,
            pub status: String,
            pub priority: i32,
            pub run_at: NaiveDateTime,
        }
    });
    insta::assert_snapshot!(code);
}

/// Issue 24: a cancelled state, and claims that look for pauses of the table and of a tenant.
#[test]
fn cancelled_state_and_pausable_key() {
    let code = expand(quote! {
        #[derive(Queryable, Selectable, Claimable)]
        #[diesel(table_name = tasks)]
        #[claimable(state = status, ready = "new", claimed = "running", cancelled = "cancelled",
                    pausable(key = tenant))]
        pub struct Task {
            pub id: i64,
            pub status: String,
            pub tenant: String,
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

/// A state field whose type the derive cannot read (an enum, an alias, here generic): its values
/// are converted into it by the compiler, spanned at each value; the `Selectable` check is
/// generic like the model.
#[test]
fn enum_state_on_a_generic_model() {
    let code = expand(quote! {
        #[derive(Queryable, Selectable, Claimable)]
        #[diesel(table_name = jobs)]
        #[claimable(state = status, ready("new", "retry"), claimed = "running")]
        pub struct Job<T: Payload> {
            pub id: i64,
            pub status: Status,
            pub payload: T,
        }
    });
    insta::assert_snapshot!(code);
}

/// A value of the wrong kind for a field the derive can read is an error at the value, not a
/// type check left to the compiler.
#[test]
fn state_values_checked_against_the_field() {
    let code = derive_claimable_inner(quote! {
        #[claimable(state = status, ready(1, "2"), claimed = None, done = Some("d"))]
        pub struct Job { pub id: i64, pub status: std::string::String }
    })
    .to_string();
    assert!(code.contains("`1` in `ready(…)` is an integer"), "{code}");
    assert_eq!(
        code.matches("compile_error").count(),
        3,
        "`\"2\"` is a string: {code}"
    );
    assert!(code.contains("`claimed = None` is SQL NULL"), "{code}");
    assert!(code.contains("`done = Some(…)` is an `Option`"), "{code}");
    for accepted in [
        quote!(#[claimable(state = status, ready = 1, claimed = -32768, done = 32767)]),
        quote!(#[claimable(state = status, ready(None, 1), claimed = Some(2))]),
    ] {
        let ty = if accepted.to_string().contains("None") {
            quote!(Option<i16>)
        } else {
            quote!(i16)
        };
        let code = derive_claimable_inner(quote! {
            #accepted
            pub struct Job { pub id: i64, pub status: #ty }
        })
        .to_string();
        assert!(!code.contains("compile_error"), "{code}");
        assert!(
            !code.contains("From"),
            "no conversion check for a read type: {code}"
        );
    }
}

#[test]
fn seed_000_job_lease() {
    let code = expand_as(
        Capability::JobLease,
        quote! {
            #[derive(Queryable, Selectable, JobLease)]
            #[diesel(table_name = job_status, primary_key(job_id))]
            #[job_lease(holder = running_at, started_at = last_run_started, next_run = next_run)]
            pub struct JobStatus {
                pub job_id: String,
                pub running_at: Option<String>,
                pub last_run_started: Option<NaiveDateTime>,
                pub next_run: Option<NaiveDateTime>,
            }
        },
    );
    insta::assert_snapshot!(code);
}

#[test]
fn seed_001_control_table() {
    let code = expand_as(
        Capability::ControlTable,
        quote! {
            #[derive(Queryable, Selectable, ControlTable)]
            #[diesel(table_name = process_control, primary_key(queue_position))]
            #[control_table(
                ticket = queue_position,
                owner = requesting_id,
                resource = resource,
                mode = access_type,
                shared = "R",
                exclusive = "W"
            )]
            pub struct ProcessControl {
                pub queue_position: i32,
                pub requesting_id: String,
                pub resource: String,
                pub access_type: String,
            }
        },
    );
    insta::assert_snapshot!(code);
}

#[test]
fn seed_002_guard_with_composite_key() {
    let code = expand_as(
        Capability::ClaimIfNull,
        quote! {
            #[derive(Queryable, Selectable, ClaimIfNull)]
            #[diesel(table_name = mailing, primary_key(campaign_id, user_id))]
            #[claim_if_null(column = sent_by)]
            pub struct Mailing {
                pub campaign_id: i32,
                pub user_id: i64,
                pub sent_by: Option<String>,
            }
        },
    );
    insta::assert_snapshot!(code);
}

#[test]
fn seed_002_insert_once_returning() {
    let code = expand_as(
        Capability::InsertOnce,
        quote! {
            #[derive(Insertable, InsertOnce)]
            #[diesel(table_name = notification)]
            #[insert_once(returning = Notification)]
            pub struct NewNotification {
                pub id: i64,
                pub user_id: i64,
                pub previous_notification: i64,
                pub body: String,
            }
        },
    );
    insta::assert_snapshot!(code);
}

#[test]
fn errors_expand_to_compile_error() {
    let tokens = derive_claimable_inner(quote! {
        #[claimable(stat = status, claim_if_null = notified)]
        pub struct Action { pub id: i64, pub notified: Option<i64> }
    });
    let code = tokens.to_string();
    assert!(code.contains("compile_error"), "{code}");
    assert!(code.contains("unknown attribute `stat`"), "{code}");
}

#[test]
fn fallback_after_an_attribute_error() {
    let code = expand_with_errors(quote! {
        #[derive(Queryable, Selectable, Claimable)]
        #[diesel(table_name = test)]
        #[claimable(state = processed, ready = false, claimd = true)]
        pub struct Test {
            pub id: i64,
            pub data: String,
            pub processed: bool,
        }
    });
    insta::assert_snapshot!(code);
}

#[test]
fn fallback_uses_the_key_and_row_types_that_parsed() {
    let input = quote! {
        #[derive(Insertable, InsertOnce, ClaimIfNull)]
        #[diesel(table_name = mailing, primary_key(campaign_id, user_id))]
        #[insert_once(returning = Mailing)]
        #[insert_once(rows = 2)]
        #[claim_if_null(column = "sent")]
        pub struct NewMailing<'a> {
            pub campaign_id: i32,
            pub user_id: i64,
            pub body: &'a str,
        }
    };
    let code = expand_with_errors_as(Capability::InsertOnce, input.clone())
        + &expand_with_errors_as(Capability::ClaimIfNull, input);
    let flat: String = code.split_whitespace().collect();
    assert!(flat.contains("forNewMailing<'a>"), "{code}");
    assert!(flat.contains("typePk=(i32,i64);"), "{code}");
    assert!(flat.contains("typeRow=Mailing;"), "{code}");
    assert!(
        flat.contains("typeMode=::diesel_lease::__private::Returning<Mailing>;"),
        "{code}"
    );
}

/// The fallback must implement every trait the derive can, or a call to an operation of a
/// missing one is the cascade of errors it exists to prevent.
#[test]
fn fallback_implements_every_trait_the_derive_can() {
    let model = |broken: Capability, extra: proc_macro2::TokenStream| {
        let extra = |c: Capability| (c == broken).then(|| quote!(, #extra));
        let (claim, null, insert, job, control) = (
            extra(Capability::Claim),
            extra(Capability::ClaimIfNull),
            extra(Capability::InsertOnce),
            extra(Capability::JobLease),
            extra(Capability::ControlTable),
        );
        quote! {
            #[derive(Queryable, Selectable, Claimable, ClaimIfNull, InsertOnce, JobLease, ControlTable
        )]
            #[diesel(table_name = jobs)]
            #[claimable(
                state = status, ready = "new", claimed = "running", done = "done", failed = "failed",
                owner = worker, claimed_at = started, attempts = tries,
                pausable(key = status)
                #claim
            )]
            #[claim_if_null(column = notified #null)]
            #[insert_once(returning = Job #insert)]
            #[job_lease(holder = worker, started_at = started #job)]
            #[control_table(ticket = id, owner = worker, resource = status, mode = status, shared = "r", exclusive = "w" #control)]
            pub struct Job {
                pub id: i64,
                pub status: String,
                pub notified: Option<i64>,
                pub worker: Option<String>,
                pub started: Option<i64>,
                pub tries: i32,
            }
        }
    };
    // Each derive with its attribute; one of them with a misspelled key when `broken` names it.
    let all = |broken: Option<Capability>| {
        let mut all = Vec::new();
        for capability in Capability::ALL {
            let extra = if broken == Some(capability) {
                quote!(stat = status)
            } else {
                quote!()
            };
            all.extend(impls(&crate::derive(model(capability, extra), capability)));
        }
        all.sort();
        all
    };
    let generated = all(None);
    assert_eq!(
        generated.len(),
        16,
        "one `Keyed` across the derives: {generated:?}"
    );
    for capability in Capability::ALL {
        assert_eq!(all(Some(capability)), generated, "{capability:?}");
    }
}

/// Diesel's shape: the derives implement traits and add no method to the user's type.
#[test]
fn the_derive_adds_no_inherent_methods() {
    let input = quote! {
        #[derive(Queryable, Selectable, Claimable, ClaimIfNull, JobLease)]
        #[diesel(table_name = jobs)]
        #[claimable(
            state = status, ready = "new", claimed = "running", done = "done", owner = worker,
        )]
        #[claim_if_null(column = notified)]
        #[job_lease(holder = worker, started_at = started)]
        pub struct Job {
            pub id: i64,
            pub status: String,
            pub notified: Option<i64>,
            pub worker: Option<String>,
            pub started: Option<i64>,
        }
    };
    let mut tokens = proc_macro2::TokenStream::new();
    for capability in [
        Capability::Claim,
        Capability::ClaimIfNull,
        Capability::JobLease,
    ] {
        tokens.extend(crate::derive(input.clone(), capability));
    }
    assert!(!tokens.to_string().contains("compile_error"), "{tokens}");
    let impls = impls(&tokens);
    assert!(impls.len() >= 5, "{impls:?}");
    assert!(
        impls.iter().all(Option::is_some),
        "an inherent impl: {tokens}"
    );
}

#[test]
fn no_fallback_when_the_input_is_not_a_struct() {
    let tokens = derive_claimable_inner(quote! {
        #[claim_if_null(column = notified)]
        pub enum Action { A }
    });
    let file = syn::parse2::<syn::File>(tokens.clone()).expect("valid Rust");
    assert!(
        file.items
            .iter()
            .all(|i| matches!(i, syn::Item::Macro(m) if m.mac.path.segments.last().is_some_and(|s| s.ident == "compile_error"))),
        "{tokens}"
    );
}
