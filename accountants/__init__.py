"""Theoretical privacy: mechanisms as events, claims, accountants and noise calibration."""

from privaudit.accountants.base import Accountant, EpsilonResult, NotApplicable
from privaudit.accountants.calibrate import RdpSplit, calibrate, calibrate_rdp_shares
from privaudit.accountants.claim import RELATIONS, UNITS, PrivacyClaim
from privaudit.accountants.registry import ACCOUNTANTS, all_epsilons, epsilon, get_accountant

__all__ = ["ACCOUNTANTS", "Accountant", "EpsilonResult", "NotApplicable", "PrivacyClaim", "RELATIONS", "RdpSplit",
           "UNITS", "all_epsilons", "calibrate", "calibrate_rdp_shares", "epsilon", "get_accountant"]
