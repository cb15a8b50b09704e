"""Check the notifiers of a task when it starts, so that a misconfigured alert fails the run now, not only when it
fires (after another notifier of the same callback may have sent its alert already)."""

from __future__ import annotations

from typing import Any

#: The task callbacks whose notifiers are checked.
CALLBACKS = ("on_execute_callback", "on_failure_callback", "on_success_callback", "on_retry_callback",
             "on_skipped_callback")


def notifiers_of(task: Any) -> list[Any]:
    """The callbacks of ``task`` that can check their connection (a ``check_connection`` method: the notifiers of
    airflow_deltaberg.notifications), in callback order."""
    found: list[Any] = []
    for name in CALLBACKS:
        callbacks = getattr(task, name, None) or []
        for callback in callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]:
            if callable(getattr(callback, "check_connection", None)):
                found.append(callback)
    return found


def check_notifiers(task: Any, context: Any | None = None) -> None:
    """Call ``check_connection`` of every notifier of ``task``, rendering its templated fields first (a
    connection id may be a template). Raises the first NotifierConfigError."""
    for notifier in notifiers_of(task):
        if context is not None and getattr(notifier, "template_fields", None):
            notifier.render_template_fields(context)
        notifier.check_connection()


def fail_on_broken_notifiers(task: Any, context: Any) -> None:
    """``check_notifiers`` at the start of a task: a NotifierConfigError fails the task without retries (a
    connection does not mend itself between tries)."""
    from airflow_deltaberg.core.errors import NotifierConfigError
    from airflow_deltaberg.version_compat import AirflowFailException

    try:
        check_notifiers(task, context)
    except NotifierConfigError as exc:
        raise AirflowFailException(f"{type(exc).__name__}: {exc} (task {task.task_id}; checked when the task "
                                   f"starts, before the table is read)") from exc
