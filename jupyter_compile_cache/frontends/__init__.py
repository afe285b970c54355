"""The front ends: the IPython magics, the command line, the widget panel, the tables they print, and the demo.
They call the session core (core/) and get typed records back."""
