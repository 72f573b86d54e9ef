//! The subset of HCL that the plugins' `plugin_data` uses.
