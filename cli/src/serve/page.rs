//! The HTML. `maud` escapes every value it inserts; the only unescaped text is this file's own
//! style and script.

use maud::{html, Markup, PreEscaped, DOCTYPE};

use super::routes::{CANCEL, PAUSE, PREFIX, RELEASE_LEASE, RELEASE_TICKET, RESUME, RETRY_DEAD};
use super::snapshot::{holders, Snapshot, TableView, Unreadable};
use super::State;
use crate::queues::{Requests, SemaphoreView};
use crate::report::{duration, relative};

const STYLE: &str = "
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f0f0f0}.muted{color:#777}.bad{color:#b00020;font-weight:600}.ok{color:#1b7a1b}
.banner{padding:.7em 1em;border-radius:4px;margin:1em 0}.down{background:#fde7ea;border:1px solid #b00020}
.note{background:#fff7d6;border:1px solid #d9b500}form{display:inline;margin:0}
button{cursor:pointer}#token{width:22em}
";

/// Refreshes unless the operator is typing into a field (the token, a key), and keeps the token for this tab only
/// (sessionStorage), copying it into every action form.
const SCRIPT: &str = "
(function(){
var secs=+document.body.dataset.refresh, field=document.getElementById('token');
function fill(){document.querySelectorAll('input[name=token]').forEach(function(i){i.value=field.value;});}
if(field){field.value=sessionStorage.getItem('diesel-lease-token')||'';fill();
 field.addEventListener('input',function(){sessionStorage.setItem('diesel-lease-token',field.value);fill();});}
if(secs>0){setInterval(function(){if(!document.activeElement||document.activeElement.tagName!=='INPUT'){location.replace('/');}},secs*1000);}
})();
";

/// A whole page around `body`.
fn layout(title: &str, state: &State, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) " · diesel-lease" }
                // Without scripts, the browser refreshes the page itself.
                noscript { meta http-equiv="refresh" content=(format!("{};url=/", state.refresh)); }
                style { (PreEscaped(STYLE)) }
            }
            body data-refresh=(state.refresh) {
                (body)
                script { (PreEscaped(SCRIPT)) }
            }
        }
    }
    .into_string()
}

/// A short page: what an action did, or why it was refused. It goes back to the overview on
/// its next refresh.
pub(super) fn message(title: &str, text: &str, state: &State) -> String {
    layout(
        title,
        state,
        html! {
            h1 { (title) }
            p #message { (text) }
            p { a href="/" { "Back to the overview" } }
        },
    )
}

/// The overview.
pub(super) fn overview(snapshot: &Snapshot<'_>, state: &State) -> String {
    let body = match snapshot {
        Snapshot::Unreachable { backend, error } => html! {
            h1 { "diesel-lease" }
            div .banner.down #unreachable {
                strong { "The database (" (backend) ") cannot be reached." }
                br;
                (error)
                br;
                span .muted { "This page keeps trying every " (state.refresh) " s." }
            }
        },
        Snapshot::Read {
            backend,
            leases,
            semaphores,
            tables,
        } => html! {
            h1 { "diesel-lease" }
            p .muted {
                (backend) " · refreshes every " (state.refresh) " s · "
                @if state.token.is_some() { "actions on" } @else { "read-only" }
            }
            @if state.token.is_some() {
                p {
                    label for="token" { "Action token: " }
                    input #token type="password" autocomplete="off" placeholder="the token printed at start";
                }
            }
            h2 { "Leases" }
            @match leases {
                Ok(leases) => (lease_table(leases, state)),
                Err(e) => p .bad { "Cannot read the leases: " (e) },
            }
            h2 { "Semaphores" }
            @match semaphores {
                Ok(all) => (semaphore_table(all, state)),
                Err(e) => p .bad { "Cannot read the semaphores: " (e) },
            }
            @for table in tables { (claims_table(table, state)) }
            h2 { "Who holds what" }
            @match (leases, semaphores) {
                (Ok(l), Ok(s)) => (holder_table(l, s)),
                _ => p .muted { "Unknown: see above." },
            }
        },
    };
    layout("Operator's page", state, body)
}

/// A button that posts action `name` with `fields` and the token (filled in by the script).
pub(super) fn action_button(name: &str, label: &str, fields: &[(&str, &str)]) -> Markup {
    html! {
        form method="post" action=(format!("{PREFIX}{name}")) {
            input type="hidden" name="token";
            @for (field, value) in fields { input type="hidden" name=(field) value=(value); }
            button type="submit" { (label) }
        }
    }
}

fn lease_table(leases: &[diesel_lease::admin::LeaseEntry], state: &State) -> Markup {
    html! {
        @if leases.is_empty() { p .muted { "No leases." } } @else {
            table #leases {
                tr { th { "Name" } th { "Holder" } th { "Token" } th { "State" } th { "Expires" } th { "Next run" }
                     @if state.token.is_some() { th { "Action" } } }
                @for l in leases {
                    @let r = &l.record;
                    tr data-lease=(l.name) {
                        td { (l.name) } td { (r.holder) } td { (r.token.get()) }
                        td { @let st = crate::report::LeaseState::of(r); @if st == crate::report::LeaseState::Held { span .ok { (st.as_str()) } } @else { span .muted { (st.as_str()) } } }
                        td { (relative(r.expires_at_micros, r.read_at_micros)) }
                        td { (r.next_run_micros.map_or("-".into(), |n| relative(n, r.read_at_micros))) }
                        @if state.token.is_some() {
                            td { (action_button(RELEASE_LEASE, "Force release", &[("name", &l.name)])) }
                        }
                    }
                }
            }
        }
    }
}

fn semaphore_table(all: &[SemaphoreView], state: &State) -> Markup {
    html! {
        @if all.is_empty() { p .muted { "No semaphores." } } @else {
            table #semaphores {
                tr { th { "Resource" } th { "Permits" } th { "Ticket" } th { "Owner" } th { "Mode" } th { "State" }
                     th { "Age" } th { "Expires" } @if state.token.is_some() { th { "Action" } } }
                @for s in all {
                    @if s.queue.is_empty() {
                        tr { td { (s.resource) } td { (s.permits) }
                             td colspan="6" .muted { (s.requests.describe().unwrap_or_else(|| "idle".into())) }
                             @if state.token.is_some() { td {} } }
                    }
                    @for (place, q) in s.queue.iter().enumerate() {
                        tr {
                            td { (s.resource) @if let Requests::ControlTable(t) = &s.requests { br; span .muted { "in " code { (t) } } } }
                            td { (s.permits) } td { (q.ticket) } td { (q.owner) }
                            td { (q.mode) }
                            td { @if q.granted { span .ok { "holding" } } @else { "waiting #" (s.queue.iter().take(place).filter(|p| !p.granted).count() + 1) } }
                            td { @match q.requested_at_micros { Some(r) => (duration(s.read_at_micros - r)), None => "-" } }
                            td { (relative(q.expires_at_micros, s.read_at_micros)) }
                            @if state.token.is_some() {
                                // A control table's tickets are its own rows: the built-in
                                // release would remove a different ticket of the same number.
                                td { @if s.requests == Requests::BuiltIn {
                                    (action_button(RELEASE_TICKET, "Force release", &[("ticket", &q.ticket.to_string())]))
                                } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn claims_table(view: &TableView<'_>, state: &State) -> Markup {
    let args = &view.spec.claims;
    let failed = view
        .spec
        .failed
        .as_deref()
        .map(|f| (f != "NULL").then_some(f));
    html! {
        h2 { "Claims in " code { (args.table) } }
        (pause_line(view, state))
        @match &view.rows {
            Err(Unreadable::NotClaimable(missing)) => div .banner.note .not-claimable {
                strong { "Not claimable as described:" }
                ul { @for m in missing { li { (m) } } }
            },
            Err(Unreadable::Failed(e)) => p .bad { (e) },
            Ok(rows) if rows.is_empty() => p .muted { "No rows." },
            Ok(rows) => table .claims {
                tr { th { "State" } th { "Rows" } th { "Oldest claim" }
                     th { "Stale (older than " (duration(crate::claims::older_than_micros(args))) ")" } th { "" } }
                @for r in rows {
                    @let claimed = crate::claims::is_claimed(args, r);
                    @let dead = failed == Some(r.state.as_deref());
                    tr data-state=(r.state.as_deref().unwrap_or("NULL")) {
                        td { (r.state.as_deref().unwrap_or("NULL")) }
                        td { (r.n) }
                        td { @match r.oldest.filter(|_| claimed) { Some(o) => { (duration(r.now - o)) " ago" }, None => "-" } }
                        td .stale { @if claimed { @if r.stale > 0 { span .bad { (r.stale) } } @else { "0" } } @else { "-" } }
                        td {
                            @if dead && r.n > 0 {
                                span .bad { "dead" }
                                @if state.token.is_some() && view.spec.dead_rows().is_some() {
                                    " " (action_button(RETRY_DEAD, "Retry dead rows", &[("table", args.table.as_str())]))
                                }
                            }
                        }
                    }
                }
            },
        }
    }
}

/// Whether claims of the table (or of some keys) are paused, and, with actions on, the pause,
/// resume and cancel forms.
fn pause_line(view: &TableView<'_>, state: &State) -> Markup {
    let table = view.spec.claims.table.as_str();
    let whole = matches!(&view.pauses, Ok(p) if p.iter().any(|(column, _)| column.is_empty()));
    html! {
        @match &view.pauses {
            Ok(pauses) if whole => p .bad .paused { "Claims paused (the whole table): claims return nothing, waiters wait." },
            Ok(pauses) if !pauses.is_empty() => p .bad .paused {
                "Claims paused for "
                @for (i, (column, value)) in pauses.iter().enumerate() {
                    @if i > 0 { ", " }
                    code { (column) " = " (value) }
                }
            },
            Ok(_) => {},
            Err(e) => p .muted { "Pauses unknown (" (e) ")" },
        }
        @if state.token.is_some() {
            p .actions {
                @if whole {
                    (action_button(RESUME, "Resume claims", &[("table", table)]))
                } @else {
                    (action_button(PAUSE, "Pause claims", &[("table", table)]))
                }
                " "
                form method="post" action=(format!("{PREFIX}{PAUSE}")) {
                    input type="hidden" name="token";
                    input type="hidden" name="table" value=(table);
                    input name="key_column" placeholder="key column" size="10";
                    input name="key" placeholder="key value" size="10";
                    button type="submit" { "Pause key" }
                    button type="submit" formaction=(format!("{PREFIX}{RESUME}")) { "Resume key" }
                }
                @if view.spec.cancel_states().is_some() {
                    " "
                    form method="post" action=(format!("{PREFIX}{CANCEL}")) {
                        input type="hidden" name="token";
                        input type="hidden" name="table" value=(table);
                        input name="key" placeholder="primary key" size="8";
                        button type="submit" { "Cancel row" }
                    }
                }
            }
        }
    }
}

fn holder_table(
    leases: &[diesel_lease::admin::LeaseEntry],
    semaphores: &[SemaphoreView],
) -> Markup {
    let by_holder = holders(leases, semaphores);
    html! {
        @if by_holder.is_empty() { p .muted { "Nobody holds anything." } } @else {
            table #holders {
                tr { th { "Holder" } th { "Leases" } th { "Permits" } }
                @for (holder, h) in &by_holder {
                    tr { td { (holder) } td { (h.leases.join(", ")) } td { (h.permits.join(", ")) } }
                }
            }
        }
    }
}
