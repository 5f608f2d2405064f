//! Mutual exclusion over cluster members while their slots move.
