"""What a DP run did, as it ran, checked against its claim: the training trace and its records, the as-run checks, the
noise's joint law, and the float rounding an exact check allows."""
