var x >= 0;
var y >= 0;
maximize z: x + y;
s.t. a: x - y <= 2;
end;
