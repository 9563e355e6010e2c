//! Structure tests of the lsa and iam kinds.
