//! The tool abstraction (owned by the agent work).
