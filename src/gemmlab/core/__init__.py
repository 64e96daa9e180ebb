"""The core of a call: reading the caller's arrays (arrays), the errors gemmlab
raises (errors), the fp32_tc method choice (methods), the tuned tables
(tables), the choice of kernel (choose), validation and plan (planner),
launches (executor) and the public entry points (api)."""
