"""Theoretical privacy: mechanisms as events, claims, accountants and noise calibration."""

from accountants.base import Accountant, EpsilonResult, NotApplicable
from accountants.calibrate import RdpSplit, calibrate, calibrate_rdp_shares
from accountants.claim import RELATIONS, UNITS, PrivacyClaim
from accountants.registry import ACCOUNTANTS, all_epsilons, epsilon, get_accountant

__all__ = ["ACCOUNTANTS", "Accountant", "EpsilonResult", "NotApplicable", "PrivacyClaim", "RELATIONS", "RdpSplit",
           "UNITS", "all_epsilons", "calibrate", "calibrate_rdp_shares", "epsilon", "get_accountant"]
