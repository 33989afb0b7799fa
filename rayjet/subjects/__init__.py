"""Subjects: validation, wildcard matching, overlap and subject transforms."""

from rayjet.subjects.match import (
    FWC,
    PWC,
    is_literal,
    is_subset,
    is_valid_filter,
    is_valid_subject,
    matches_any,
    subject_matches,
    subjects_collide,
    tokens,
    validate_filter,
    validate_stored_subject,
    validate_subject,
)
from rayjet.subjects.transform import (
    SubjectTransform,
    apply_transforms,
    partition_number,
    validate_transforms,
)

__all__ = [
    "FWC",
    "PWC",
    "SubjectTransform",
    "apply_transforms",
    "is_literal",
    "is_subset",
    "is_valid_filter",
    "is_valid_subject",
    "matches_any",
    "partition_number",
    "subject_matches",
    "subjects_collide",
    "tokens",
    "validate_filter",
    "validate_stored_subject",
    "validate_subject",
    "validate_transforms",
]
