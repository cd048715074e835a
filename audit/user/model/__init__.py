"""``privaudit audit-model``: your own model and training function audited from final weights, by runs on a fixed
neighbouring pair and by a crafted canary."""
