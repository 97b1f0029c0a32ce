"""`anyaccel build` / `anyaccel cache` and the ahead-of-time (install-time) builds."""
