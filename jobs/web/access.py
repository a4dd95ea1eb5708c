"""Who may do what (DESIGN.md section 8). Groups are created by a data migration."""

from functools import wraps

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied

OPERATOR, SUPPORT, ENGINEER = "operator", "support", "engineer"
ROLES = (OPERATOR, SUPPORT, ENGINEER)


def _in_group(user, *names: str) -> bool:
    if not user.is_authenticated:
        return False
    if user.is_staff or user.is_superuser:
        return True
    return user.groups.filter(name__in=names).exists()


def can_view(user) -> bool:
    """Jobs list, job pages, dashboard, escalations (read): every role."""
    return _in_group(user, *ROLES)


def can_act_on_escalations(user) -> bool:
    return _in_group(user, SUPPORT)


def can_see_raw_events(user) -> bool:
    """Raw events and export."""
    return _in_group(user, ENGINEER)


def role_required(check):
    """Login required (302 to login), then ``check(user)`` or 403."""

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not check(request.user):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapper

    return decorator
