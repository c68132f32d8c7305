"""The error every config check raises.  Its own module so that rl_lab.config and the modules
config validates against (rl_lab.corrections) import it without importing each other."""


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and what is allowed."""


class ConfigWarning(UserWarning):
    """A configuration value has no effect under the other options (e.g. rollout_rs_threshold with rollout_rs None);
    the message names the field and the option that would use it."""
