"""The console's pages: overview, rows that need a person, one object's two sides, repair.

Server-rendered with Jinja2 (autoescaped: every cluster name, description or
error text from downstream is text on the page, never markup), no script, and
nothing loaded from another host. The guard (:func:`platform_svc.console.auth.require_operator`)
runs before every route. A POST answers with a page of its outcome (retry) or
redirects to what it started (repair), never with a form to resubmit.
"""
from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from flask import Blueprint, abort, current_app, g, redirect, render_template, request, url_for
from werkzeug.exceptions import HTTPException

from platform_svc.console import auth, reads, throttle
from platform_svc.models import RESOURCES
from platform_svc.operations.abandon import NotAbandoned, abandon
from platform_svc.operations.copies import RepairError, copy_of
from platform_svc.operations.retry import retry_failed
from platform_svc.operations.runs import read_run, recent_runs
from platform_svc.operations.sightings import OLD_AFTER
from platform_svc.operations.status import format_age
from platform_svc.states import LISTED, SyncState

log = logging.getLogger(__name__)

blueprint = Blueprint(
    "console", __name__, url_prefix="/console", template_folder="templates", static_folder="static"
)
icon = Blueprint("console_icon", __name__)


@icon.get("/favicon.ico")
def favicon():
    return "", 204, {"Cache-Control": "public, max-age=86400"}  # no icon, and no error page for one


def console():
    """What the pages read through (see :func:`platform_svc.console.register_console`)."""
    return current_app.extensions["console"]


@blueprint.before_request
def _guard():
    auth.refuse_nul()
    return auth.require_operator(console().database)


blueprint.after_request(auth.add_security_headers)


@blueprint.app_template_filter("age")
def _age(value: timedelta | None) -> str:
    return "none" if value is None else format_age(value)


@blueprint.context_processor
def _globals() -> dict:
    return {"csrf_token": auth.csrf_token, "confirmation_token": auth.confirmation_token, "resources": list(RESOURCES),
            "operator": g.get("operator")}


@blueprint.errorhandler(HTTPException)
def _error_page(error: HTTPException):
    return render_template("console/error.html", error=error), error.code


# Logging in ------------------------------------------------------------------------------


@blueprint.route("/login", methods=["GET", "POST"])
def login():
    failed, wait = False, 0
    if request.method == "POST":
        name, secret = request.form.get("operator", "").strip(), request.form.get("secret", "")
        signing_key = current_app.session_interface.key()
        device = throttle.device_of(signing_key, request.cookies.get(throttle.DEVICE_COOKIE), name)
        counted = throttle.keys(name, request.remote_addr or "-", device)
        with console().database.begin() as db_session:
            wait = throttle.take(db_session, counted)  # concurrent attempts on these keys queue here
            operator_id = None
            if not wait and name:
                operator_id = auth.check_secret(db_session=db_session, name=name, secret=secret)
            if operator_id is not None:
                throttle.admitted(db_session, counted)
                auth.open_session(db_session, operator_id)
            elif not wait:
                locked = throttle.refused(db_session, counted)
        if operator_id is not None:
            log.info("console: %s logged in", name)
            answer = redirect(auth.safe_next(request.args.get("next")))
            if device is None:  # this browser's logins count apart from now on
                answer.set_cookie(
                    throttle.DEVICE_COOKIE, throttle.device_cookie(signing_key, name),
                    max_age=throttle.DEVICE_COOKIE_DAYS * 86400, path="/console/login", secure=request.is_secure,
                    httponly=True, samesite="Strict",
                )
            return answer
        if not wait:  # one line per lockout, never one per guess, and never what was typed
            for key, failures, seconds in locked:
                log.warning("console: logins locked for %d s after %d refused in a row (%s)", seconds, failures, key)
        failed = True
    page = render_template("console/login.html", failed=failed, wait=wait)
    if wait:
        return page, 429, {"Retry-After": str(wait)}
    return page, 401 if failed else 200


@blueprint.post("/logout")
def logout():
    with console().database.begin() as db_session:
        auth.close_session(db_session)
    return redirect(url_for("console.login"))


@blueprint.route("/<path:unknown>")
def not_found(unknown: str):
    abort(404, "There is no such console page.")


# Overview --------------------------------------------------------------------------------


@blueprint.get("/")
def overview():
    ctx = console()
    with ctx.database.engine.connect() as db_session:
        seen = reads.overview(db_session=db_session, stalled_after=ctx.stalled_after)
    return render_template(
        "console/overview.html", counts=seen.counts, lease=seen.lease, passes=seen.passes, sightings=seen.sightings,
        breaker_open=ctx.breaker.is_open, stalled_after=ctx.stalled_after, old_after=OLD_AFTER,
    )


# Rows that need a person -----------------------------------------------------------------


def _resource_arg(value: str | None):
    """:raise 404: no resource has that path segment."""
    resource = reads.resource_named(value) if value else next(iter(RESOURCES))
    if resource is None:
        abort(404, f"No resource is called {value!r}.")
    return resource


def _uuid_arg(value: str | None, what: str) -> uuid.UUID | None:
    """:raise 400: not a UUID."""
    if not value:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        abort(400, f"{what} must be a UUID.")


def _state_arg(value: str | None) -> SyncState | None:
    """:raise 400: not a state a listing shows (never ignored: an unknown one would list other rows)."""
    if not value:
        return None
    if value not in LISTED:
        abort(400, f"state must be one of {', '.join(LISTED)}, not {value!r}.")
    return SyncState(value)


@blueprint.get("/rows")
def rows():
    ctx = console()
    resource = _resource_arg(request.args.get("resource"))
    state = _state_arg(request.args.get("state"))
    reason = request.args.get("reason", "").strip() or None
    after = _uuid_arg(request.args.get("after"), "after")
    account = _uuid_arg(request.args.get("account") or None, "The account's ID")
    with ctx.database.engine.connect() as db_session:
        found, next_after = reads.rows_needing_a_person(
            db_session=db_session, resource=resource, stalled_after=ctx.stalled_after, state=state, reason=reason,
            after=after, account_id=account,
        )
        reasons = reads.failure_reasons(db_session=db_session, resource=resource)
    return render_template(
        "console/rows.html", resource=resource, rows=found, next_after=next_after, state=state, reason=reason,
        after=after, reasons=reasons, stalled_after=ctx.stalled_after, account=account, listed=LISTED,
    )


@blueprint.post("/retry")
def retry():
    """"retry" (one row, with its failed descendants) or "retry all" (one resource's failed rows
    whose reason contains the text): ``sync-status --retry-failed --id`` or ``--reason``, the same code."""
    ctx = console()
    resource = _resource_arg(request.form.get("resource"))
    object_id = _uuid_arg(request.form.get("id"), "id")
    reason = request.form.get("reason", "").strip() or None
    if object_id is None and reason is None:
        abort(400, "Name a row (id) or a reason to retry.")
    outcomes = retry_failed(ctx.database, ctx.client, resource=resource, reason=reason, object_id=object_id)
    log.info(
        "console: %s retried %s %s: %d put back in line, %d left failed", g.operator, resource.plural,
        object_id or f"reason {reason!r}", sum(o.requeued for o in outcomes), sum(not o.requeued for o in outcomes),
    )
    return render_template(
        "console/retried.html", resource=resource, object_id=object_id, reason=reason, outcomes=outcomes
    )


@blueprint.post("/abandon")
def abandon_row():
    """"Abandon" on a failed row whose ID cluster_svc holds for another's object: ``platform-svc
    abandon``, the same code. The first POST answers a page that names what would be closed; only
    its form (with its own token) abandons. The page after says what was closed, or why nothing was."""
    ctx = console()
    resource = _resource_arg(request.form.get("resource"))
    object_id = _uuid_arg(request.form.get("id"), "id")
    if object_id is None:
        abort(400, "Name the row (id) to abandon.")
    action = f"abandon {resource.segment} {object_id}"
    if not auth.confirmed(action):
        row, children = _row_and_children(resource, object_id)
        return render_template(
            "console/confirm.html", action=action, target=url_for("console.abandon_row"), button="Abandon",
            title=f"Abandon {resource.words} {object_id}?", fields={"resource": resource.segment, "id": object_id},
            back=url_for("console.object_page", segment=resource.segment, object_id=object_id),
            what=f"This deletes the {resource.words} on the platform and closes its row, and every row under it, "
                 "without pushing them: the ID is retired for good, and whatever cluster_svc holds under it is "
                 "never touched. It cannot be undone.",
            objects=[(resource, row, row.get("name") or row.get("description"))] + [
                (child, c, None) for child, rows in children for c in rows if c.shown_state != "abandoned"],
        )
    try:
        done, why = abandon(ctx.database, ctx.client, resource, object_id, by=f"{g.operator} (console)"), None
    except NotAbandoned as exc:
        done, why = None, str(exc)
    log.warning("console: %s abandoned %s %s: %s", g.operator, resource.words, object_id,
                f"{done.rows} rows closed" if done else f"refused ({why})")
    return render_template("console/abandoned.html", resource=resource, object_id=object_id, done=done, why=why)


# One object, both sides ------------------------------------------------------------------


def _row_and_children(resource, object_id: uuid.UUID):
    """The platform's row (with its shown state) and the rows under it. :raise 404: no such row."""
    ctx = console()
    with ctx.database.engine.connect() as db_session:
        row = reads.platform_row(db_session=db_session, resource=resource, object_id=object_id,
                                 stalled_after=ctx.stalled_after)
        if row is None:
            abort(404, f"The platform has no {resource.words} {object_id}.")
        children = reads.children_of(db_session=db_session, resource=resource, object_id=object_id,
                                     stalled_after=ctx.stalled_after)
    return row, children


@blueprint.get("/objects/<segment>/<object_id>")
def object_page(segment: str, object_id: str):
    ctx = console()
    resource = _resource_arg(segment)
    parsed = _uuid_arg(object_id, "The object's ID")
    row, children = _row_and_children(resource, parsed)
    sides = reads.BothSides(resource, row, None, children=children)
    try:
        sides.theirs = copy_of(ctx.client, resource, parsed)
    except RepairError as exc:  # the platform's side is shown all the same, and cluster_svc's said unknown
        sides.unreadable = str(exc)
    sides.fields, sides.finding = reads.compare_sides(resource, row, sides.theirs, ctx.horizon,
                                                      known=sides.unreadable is None)
    return render_template("console/object.html", sides=sides, resource=resource, row=row)


# Repair ----------------------------------------------------------------------------------


@blueprint.get("/repair")
def repair():
    with console().database.engine.connect() as db_session:
        lease = reads.lease_holder(db_session=db_session)
        runs = recent_runs(db_session=db_session)
    return render_template("console/repair.html", lease=lease, runs=runs)


@blueprint.post("/repair")
def start_repair():
    """A dry run starts here at once; a real run, once confirmed on the page the first POST answers,
    is asked of whoever holds the lease (this process when it is free): the page of the run says
    which, and follows it."""
    ctx = console()
    dry_run = request.form.get("mode") != "repair"
    if not dry_run and not auth.confirmed("repair"):
        with ctx.database.engine.connect() as db_session:
            seen = reads.overview(db_session=db_session, stalled_after=ctx.stalled_after)
        return render_template(
            "console/confirm.html", action="repair", target=url_for("console.start_repair"),
            button="Start the real run", title="Start a real repair run?", fields={"mode": "repair"},
            back=url_for("console.repair"), objects=[],
            what="A real run compares every synced object with cluster_svc's copy and changes cluster_svc where "
                 "they differ: a copy missing, behind or diverged is put back in line and pushed again with the "
                 "platform's values, overwriting cluster_svc's; a copy still alive that the platform deleted is "
                 "deleted. It compares " + ", ".join(
                     f"{item.counts[SyncState.SYNCED]} synced {item.resource.plural.replace('_', ' ')}"
                     for item in seen.counts) + ". A dry run reports the same findings and changes nothing.",
        )
    run_id = ctx.runs.start(operator=g.operator, dry_run=dry_run)
    log.info("console: %s started a repair %s (%s)", g.operator, "dry run" if dry_run else "run", run_id)
    return redirect(url_for("console.repair_run", run_id=run_id), code=303)


@blueprint.get("/repair/<run_id>")
def repair_run(run_id: str):
    parsed = _uuid_arg(run_id, "The run's ID")
    with console().database.engine.connect() as db_session:
        run = read_run(db_session=db_session, run_id=parsed)
        lease = reads.lease_holder(db_session=db_session)
    if run is None:
        abort(404, f"No repair run {parsed}.")
    return render_template("console/run.html", run=run, lease=lease)
