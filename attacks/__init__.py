"""Membership inference and auditing attacks on trained models, and their metrics and epsilon bounds."""

from privaudit.attacks.base import Attack, AttackConfig, Target
from privaudit.attacks.bounds.lower_bound import EpsilonLowerBound
from privaudit.attacks.bounds.multi_run import multi_run_bound
from privaudit.attacks.bounds.one_run import one_run_bound, one_run_bound_search
from privaudit.attacks.executor import Executor, LocalExecutor, make_executor
from privaudit.attacks.registry import ATTACKS, attack_class, make_attack
from privaudit.attacks.result import AttackResult
from privaudit.attacks.membership.shadow_models import DataRef, DefenseRef, TrainJob, train_models

__all__ = ["ATTACKS", "Attack", "AttackConfig", "AttackResult", "DataRef", "DefenseRef", "EpsilonLowerBound",
           "Executor", "LocalExecutor", "Target", "TrainJob", "attack_class", "make_attack", "make_executor",
           "multi_run_bound", "one_run_bound", "one_run_bound_search", "train_models"]
